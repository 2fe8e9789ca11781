"""The Ray executor against a real Ray cluster started by the test on 127.0.0.1: tasks stream
their records back to the driver's run folder, a worker killed mid-episode has its episode
rerun (nothing lost, nothing counted twice), and ALFWorld on Ray matches a run in this process
episode for episode at temperature 0."""
from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray")

from metacog_fast.runs import ExecutorConfig, RunFolder, run_tasks  # noqa: E402
from metacog_fast.runs.ray_executor import start_local_cluster  # noqa: E402
import runs_probe_tasks  # noqa: E402
from runs_probe_tasks import chain_group, chain_key, chain_tasks, expected_values  # noqa: E402

WORK = 20_000


@pytest.fixture(scope="module")
def cluster():
    """A 2-CPU local cluster on loopback; the test module's task functions travel by value
    (Ray's workers do not have tests/ on their path)."""
    if ray.is_initialized():
        ray.shutdown()
    start_local_cluster(2)
    ray.cloudpickle.register_pickle_by_value(runs_probe_tasks)
    yield ray
    ray.cloudpickle.unregister_pickle_by_value(runs_probe_tasks)
    ray.shutdown()


def test_ray_executor_starts_and_stops_its_own_local_cluster(tmp_path):
    """With no cluster connected or running, ``executor="ray"`` starts one (2 CPUs, 127.0.0.1)
    for the run and shuts it down afterwards."""
    if ray.is_initialized():
        ray.shutdown()
    ray.cloudpickle.register_pickle_by_value(runs_probe_tasks)
    try:
        folder = RunFolder(tmp_path, {"work": WORK})
        s = run_tasks(folder, chain_tasks(2, 2, WORK), chain_group, ExecutorConfig(executor="ray", workers=2, progress=False))
    finally:
        ray.cloudpickle.unregister_pickle_by_value(runs_probe_tasks)
    assert (s.executor, s.played, s.duplicates) == ("ray", 4, 0)
    assert [folder.read(chain_key("g1", i))["value"] for i in range(2)] == expected_values("g1", 2, WORK)
    # its workers run at this process's priority (Ray's default, nice 15, starves them under load)
    assert {folder.read(chain_key(g, i))["nice"] for g in ("g0", "g1") for i in range(2)} == {os.nice(0)}
    assert not ray.is_initialized()


def test_ray_run_streams_records_to_the_driver(tmp_path, cluster):
    folder = RunFolder(tmp_path, {"work": WORK})
    s = run_tasks(folder, chain_tasks(3, 3, WORK), chain_group, ExecutorConfig(executor="ray", progress=False))
    assert (s.executor, s.played, s.duplicates, s.reruns) == ("ray", 9, 0, 0)
    for g in ("g0", "g1", "g2"):
        assert [folder.read(chain_key(g, i))["value"] for i in range(3)] == expected_values(g, 3, WORK)
    assert (tmp_path / "logs" / "g2.txt").read_text().splitlines() == [chain_key("g2", i) for i in range(3)]
    pids = {folder.read(chain_key(g, 0))["pid"] for g in ("g0", "g1", "g2")}
    assert os.getpid() not in pids  # played by Ray workers, written here
    assert cluster.is_initialized()  # a cluster the run did not start is left running


def test_ray_worker_killed_mid_episode_is_rerun(tmp_path, cluster):
    marker = tmp_path / "died"
    folder = RunFolder(tmp_path / "run", {"work": WORK})
    tasks = chain_tasks(2, 4, WORK, die_marker=str(marker), die_at=2)
    s = run_tasks(folder, tasks, chain_group, ExecutorConfig(executor="ray", progress=False))
    assert marker.exists()  # a Ray worker process really died mid-episode
    group, episode, pid = marker.read_text().split()
    assert s.reruns == 1 and s.played == 8 and s.duplicates == 0
    for g in ("g0", "g1"):
        recs = [folder.read(chain_key(g, i)) for i in range(4)]
        assert [r["value"] for r in recs] == expected_values(g, 4, WORK)  # nothing lost, state rebuilt
    recs = [folder.read(chain_key(group, i)) for i in range(4)]
    assert recs[int(episode)]["pid"] != int(pid)  # the killed episode was played again, by another worker
    assert len(list((tmp_path / "run" / "episodes").rglob("*.json"))) == 8  # counted once each


def test_ray_gives_up_after_max_retries(tmp_path, cluster):
    folder = RunFolder(tmp_path / "run", {})
    # the episode before the fatal one sleeps, so its record has reached the driver when the worker dies
    tasks = chain_tasks(1, 3, WORK, die_marker=str(tmp_path / "died"), die_at=2, die_always=True, sleep=0.3)
    with pytest.raises(RuntimeError, match=r"worker died 2 times \(max_retries=1\)"):
        run_tasks(folder, tasks, chain_group, ExecutorConfig(executor="ray", max_retries=1, progress=False))
    assert folder.read(chain_key("g0", 0))["value"] == expected_values("g0", 3, WORK)[0]  # kept
    assert folder.has(chain_key("g0", 1)) and not folder.has(chain_key("g0", 2))


def _without_timings(x):
    """A record with every wall-clock measurement removed (the rest must match exactly)."""
    if isinstance(x, dict):
        return {k: _without_timings(v) for k, v in x.items() if "seconds" not in k}
    if isinstance(x, list):
        return [_without_timings(v) for v in x]
    return x


@pytest.mark.starts_first(seconds=40)
def test_alfworld_on_ray_matches_an_inline_run_episode_for_episode(tmp_path, cluster):
    """Reflexion on 2 games of 2 task types (one task per type), 2 episodes each: the second
    episode's prompt carries the first one's reflection, so group state is exercised. The local side
    runs in this process (local worker processes against inline: tests/test_runs_harness.py)."""
    from metacog_fast.alfworld.config import AgentConfig, RunConfig
    from metacog_fast.alfworld.protocol import episode_plan, load_records, run_protocol, select_games

    ac = AgentConfig(examples=0, max_steps=1, action_max_tokens=8, max_thinks=1, reflection_max_tokens=8)
    cfg = RunConfig(agent="reflexion", tasks=2, adapt_episodes=0, test_episodes=2, n_ctx=4096, agent_config=ac)
    local = run_protocol(tmp_path / "inline", cfg, executor=ExecutorConfig(executor="inline", progress=False))
    on_ray = run_protocol(tmp_path / "ray", cfg, executor=ExecutorConfig(executor="ray", progress=False))
    assert local["harness"]["executor"] == "inline" and on_ray["harness"]["executor"] == "ray"
    assert local["episodes_played"] == on_ray["episodes_played"] == 4
    games = select_games(cfg.split, cfg.tasks)
    assert len({g["task_type"] for g in games}) == 2
    for g in games:
        a = load_records(tmp_path / "inline", g["game"], episode_plan(cfg))
        b = load_records(tmp_path / "ray", g["game"], episode_plan(cfg))
        assert len(a) == len(b) == 2
        assert a[1]["end"]["reflection"] and a[0]["end"]["reflection"] in a[1]["begin"]["prefix"]
        for ra, rb in zip(a, b):
            assert ra["pairs"] == rb["pairs"] and ra["won"] == rb["won"]
            assert _without_timings(ra) == _without_timings(rb)
