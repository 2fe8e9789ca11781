"""End to end: a tiny pre-training + adaptation run for both agents with its report, and a run
that is really killed mid-way (SIGKILL of a subprocess) and resumed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("metaworld")

from metacog_fast.metaworld.train.config import profile  # noqa: E402
from metacog_fast.metaworld.train.report import assess_on_scripted, write_report  # noqa: E402
from metacog_fast.metaworld.train.runner import ProtocolRunner, read_state  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _tiny(agent: str, **kw):
    """The smoke profile (2 + 2 tasks, 20-step episodes) with 1 scripted episode per task."""
    cfg = profile("smoke", agent=agent, **kw)
    cfg.scripted = replace(cfg.scripted, episodes_per_task=1)
    return cfg


def test_tiny_pretrain_and_adapt_end_to_end(tmp_path):
    runs = {}
    for agent in ("muse", "dreamer"):
        cfg = _tiny(agent)
        st = ProtocolRunner(cfg, tmp_path / agent, progress=False).run()
        n_updates = cfg.pretrain_warmup_updates + cfg.pretrain_episodes * cfg.pretrain_updates_per_episode \
            + len(cfg.novel_tasks) * cfg.adapt_episodes * cfg.adapt_updates_per_episode
        assert st["phase"] == "done" and st["updates"] == n_updates
        assert len(st["records"]) == len(cfg.novel_tasks) * cfg.adapt_episodes
        assert (tmp_path / agent / "pretrained.safetensors").exists()
        runs["MUSE" if agent == "muse" else "Dreamer-v3"] = (tmp_path / agent, cfg)
    res = write_report(runs, tmp_path / "report")
    for f in ("results.json", "table1.md", "steps_to_success.png", "MUSE.json", "MUSE_episodes.csv"):
        assert (tmp_path / "report" / f).stat().st_size > 0, f
    muse = json.loads((tmp_path / "report" / "MUSE.json").read_text())
    assert 0.0 <= muse["metacognitive_accuracy"] <= 1.0
    assert muse["episodes"] == 4 and muse["steps_evaluated"] == 4 * 21  # T_max + 1 psi rows per episode
    assert "metacognitive_accuracy" not in res["Dreamer-v3"]  # no SA head trained for the baseline
    table = (tmp_path / "report" / "table1.md").read_text()
    assert "| MUSE | Metacognitive Accuracy |" in table and "| Dreamer-v3 |" in table
    # supplementary SA check on known tasks with the scripted policy (held-out layouts)
    sup = assess_on_scripted(tmp_path / "muse" / "pretrained", ("reach-v3",), episodes_per_task=2)
    assert sup["episodes"] == 2 and 0.0 <= sup["metacognitive_accuracy"] <= 1.0


def _state(run_dir: Path) -> dict | None:
    try:
        return read_state(run_dir)
    except (OSError, ValueError, KeyError):
        return None


def test_resume_after_kill_continues_counters_and_matches_uninterrupted_run(tmp_path):
    run_dir = tmp_path / "killed"
    code = (
        "import sys; from dataclasses import replace;"
        "from metacog_fast.metaworld.train.config import profile;"
        "from metacog_fast.metaworld.train.runner import ProtocolRunner;"
        "cfg = profile('smoke', agent='muse', adapt_episodes=4); cfg.scripted = replace(cfg.scripted, episodes_per_task=2);"
        f"ProtocolRunner(cfg, {str(run_dir)!r}, progress=False).run()"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    killed_at = None
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        st = _state(run_dir)
        if st is not None and st["phase"] == "adapt" and len(st["records"]) >= 1:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed_at = st
            break
        time.sleep(0.02)
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert killed_at is not None, f"the run finished or failed before it could be killed:\n{out[-2000:]}"
    assert proc.returncode == -signal.SIGKILL
    before = _state(run_dir)
    assert before["phase"] != "done"

    cfg = profile("smoke", agent="muse", adapt_episodes=4)
    cfg.scripted = replace(cfg.scripted, episodes_per_task=2)
    st = ProtocolRunner(cfg, run_dir, progress=False).run()
    assert st["resumed"] == 1 and st["phase"] == "done"
    assert st["updates"] >= before["updates"]
    assert len(st["records"]) == len(cfg.novel_tasks) * cfg.adapt_episodes
    assert [r["episode"] for r in st["records"]] == list(range(4)) * 2

    # the same run without interruption gives the same episodes (RNG states, replay and layouts restored)
    ref = ProtocolRunner(cfg, tmp_path / "straight", progress=False).run()
    assert ref["updates"] == st["updates"] and ref["env_steps"] == st["env_steps"]
    for a, b in zip(ref["records"], st["records"]):
        assert a["task"] == b["task"] and a["success"] == b["success"]
        np.testing.assert_allclose(a["psi_sum_mean"], b["psi_sum_mean"], rtol=1e-5)
        np.testing.assert_allclose(a["return"], b["return"], rtol=1e-5)


def test_resume_refuses_a_different_config(tmp_path):
    cfg = _tiny("muse")
    r = ProtocolRunner(cfg, tmp_path, progress=False)
    r.run(stop_after=lambda s: s["scripted"] >= 1)
    with pytest.raises(ValueError, match="different config"):
        ProtocolRunner(_tiny("muse", seed=3), tmp_path, progress=False)
