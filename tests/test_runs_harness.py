"""The run harness (metacog_fast.runs) with real processes: the configuration snapshot, atomic
records, resume after a real kill, the local process executor, a worker killed mid-episode."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from metacog_fast.runs import ExecutorConfig, RunFolder, run_tasks
from runs_probe_tasks import chain_group, chain_key, chain_tasks, expected_values

HERE = Path(__file__).resolve().parent
WORK = 20_000  # SHA-256 rounds per episode: a few ms


def _values(folder: RunFolder, groups: int, episodes: int) -> dict[str, list[str]]:
    return {f"g{j}": [folder.read(chain_key(f"g{j}", i))["value"] for i in range(episodes)] for j in range(groups)}


def test_importing_the_package_does_not_import_ray():
    code = "import sys, metacog_fast, metacog_fast.runs, metacog_fast.alfworld.protocol; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_folder_refuses_a_different_configuration_but_not_ignored_fields(tmp_path):
    RunFolder(tmp_path, {"a": 1, "workers": 1, "agent": {"seed": 0}}, ignore=("workers",), extra={"games": [1]})
    RunFolder(tmp_path, {"a": 1, "workers": 4, "agent": {"seed": 0}}, ignore=("workers",))  # resumable
    doc = json.loads((tmp_path / "config.json").read_text())
    assert doc["config"]["workers"] == 4 and doc["games"] == [1]  # extra kept from the first snapshot
    with pytest.raises(ValueError, match=r"different configuration \(fields \['a', 'agent.seed'\]\)"):
        RunFolder(tmp_path, {"a": 2, "workers": 1, "agent": {"seed": 1}}, ignore=("workers",))
    with pytest.raises(ValueError, match="key"):
        RunFolder(tmp_path / "x", {}).record_path("../escape")


def test_folder_refuses_a_model_that_changed_behind_its_name(tmp_path):
    """The identity (what the configuration's names stand for) is stored when the folder is made;
    a resume with another identity is refused naming the role, the same one resumes, and a folder
    made before identities were recorded resumes unchecked and stays without one."""
    cfg = {"llm": "finetuned:alfworld"}
    RunFolder(tmp_path / "r", cfg, identity={"llm": {"adapter_sha256": "a1"}, "reflector": None})
    RunFolder(tmp_path / "r", cfg, identity={"llm": {"adapter_sha256": "a1"}, "reflector": None})
    with pytest.raises(ValueError, match=r"what llm stands for changed since it was played"):
        RunFolder(tmp_path / "r", cfg, identity={"llm": {"adapter_sha256": "b2"}, "reflector": None})
    assert json.loads((tmp_path / "r" / "config.json").read_text())["identity"]["llm"] == {"adapter_sha256": "a1"}
    RunFolder(tmp_path / "old", cfg)
    RunFolder(tmp_path / "old", cfg, identity={"llm": {"adapter_sha256": "b2"}})
    assert "identity" not in json.loads((tmp_path / "old" / "config.json").read_text())


def test_executor_config_names_the_bad_field():
    with pytest.raises(ValueError, match="executor"):
        ExecutorConfig(executor="threads").validate()
    with pytest.raises(ValueError, match="executor"):
        ExecutorConfig(executor="ray://headnode").validate()
    with pytest.raises(ValueError, match="workers"):
        ExecutorConfig(workers=0).validate()
    with pytest.raises(ValueError, match="max_retries"):
        ExecutorConfig(max_retries=-1).validate()


def test_inline_run_then_resume_plays_nothing_twice(tmp_path):
    folder = RunFolder(tmp_path, {"work": WORK})
    s = run_tasks(folder, chain_tasks(2, 3, WORK), chain_group, ExecutorConfig(executor="inline", progress=False))
    assert (s.played, s.already_done, s.duplicates, s.executor) == (6, 0, 0, "inline")
    assert _values(folder, 2, 3) == {g: expected_values(g, 3, WORK) for g in ("g0", "g1")}
    assert (tmp_path / "logs" / "g1.txt").read_text().splitlines() == [chain_key("g1", i) for i in range(3)]
    again = run_tasks(folder, chain_tasks(2, 3, WORK), chain_group, ExecutorConfig(executor="inline", progress=False))
    assert (again.played, again.already_done, again.executor) == (0, 6, "none")


def test_process_executor_runs_groups_in_two_workers(tmp_path):
    folder = RunFolder(tmp_path, {"work": WORK})
    s = run_tasks(folder, chain_tasks(3, 2, WORK, sleep=0.3), chain_group,
                  ExecutorConfig(executor="process", workers=2, progress=False))
    assert (s.played, s.duplicates, s.executor) == (6, 0, "process")
    assert _values(folder, 3, 2) == {g: expected_values(g, 2, WORK) for g in ("g0", "g1", "g2")}
    pids = {folder.read(chain_key(f"g{j}", 0))["pid"] for j in range(3)}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2  # worker processes, never more than 2


def test_process_worker_killed_mid_episode_is_rerun(tmp_path):
    marker = tmp_path / "died"
    folder = RunFolder(tmp_path / "run", {"work": WORK})
    tasks = chain_tasks(2, 3, WORK, die_marker=str(marker), die_at=1)
    s = run_tasks(folder, tasks, chain_group, ExecutorConfig(executor="process", workers=2, progress=False))
    assert marker.exists()  # a worker really died mid-episode
    assert s.reruns >= 1 and s.played == 6 and s.duplicates == 0
    assert _values(folder, 2, 3) == {g: expected_values(g, 3, WORK) for g in ("g0", "g1")}
    group = marker.read_text().split()[0]
    rerun = [folder.read(chain_key(group, i)) for i in range(3)]
    assert rerun[1]["resumed_from"] >= 1  # the rerun started from the record written before the kill


def test_a_task_error_is_raised_not_retried(tmp_path):
    folder = RunFolder(tmp_path, {})
    bad = chain_tasks(1, 2, WORK)
    bad[0].payload["episodes"] = "two"  # the task's own code fails: a bug, not a dead worker
    with pytest.raises(TypeError):
        run_tasks(folder, bad, chain_group, ExecutorConfig(executor="process", workers=1, progress=False))


def test_resume_after_the_driver_is_killed(tmp_path):
    out = tmp_path / "run"
    groups, episodes = 2, 6
    cmd = [sys.executable, str(HERE / "runs_probe_tasks.py"), str(out), "process", str(groups), str(episodes),
           str(WORK), "0.4"]
    proc = subprocess.Popen(cmd, env=dict(os.environ, PYTHONPATH=str(HERE)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    folder_probe = out / "episodes"
    deadline = time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:
            if folder_probe.exists() and sum(1 for _ in folder_probe.rglob("*.json")) >= 3:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its workers, mid-run
        proc.wait()
    written = sorted(p.relative_to(out).as_posix() for p in folder_probe.rglob("*.json"))
    assert 3 <= len(written) < groups * episodes
    assert all(isinstance(json.loads((out / p).read_text()), dict) for p in written)  # whole records only
    before = {p: (out / p).read_bytes() for p in written}
    folder = RunFolder(out, {"groups": groups, "episodes": episodes, "work": WORK})
    s = run_tasks(folder, chain_tasks(groups, episodes, WORK), chain_group,
                  ExecutorConfig(executor="process", workers=2, progress=False))
    assert s.already_done == len(written) and s.played == groups * episodes - len(written) and s.duplicates == 0
    assert all((out / p).read_bytes() == b for p, b in before.items())  # finished episodes not replayed
    assert _values(folder, groups, episodes) == {g: expected_values(g, episodes, WORK) for g in ("g0", "g1")}
