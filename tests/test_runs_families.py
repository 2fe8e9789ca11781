"""Families on the one harness beyond ALFWorld and ScienceWorld (whose own tests cover them):
the town-sim ablation as resumable tasks, with the embedded model."""
from __future__ import annotations

import json

import pytest

from metacog_fast.agents.generative import AgentConfig
from metacog_fast.runs import ExecutorConfig
from metacog_fast.sim.runner import RunOptions, ablate


def test_sim_ablation_runs_resume_and_keep_their_files(tmp_path):
    opts = RunOptions(scenario="zombie", agents=2, steps=1, judge=False)
    ac = AgentConfig(progress_every=1)
    logs: list[str] = []
    doc = ablate(opts, str(tmp_path), None, None, configs=("all", "none"), runs=1, agent_config=ac,
                 log=logs.append, executor=ExecutorConfig(executor="inline", progress=False))
    assert set(doc["table"]) == {"all", "none"} and len(logs) == 2
    for name in ("all", "none"):
        d = tmp_path / f"{name}_run0"
        run = json.loads((d / "run.json").read_text())
        assert all(run["config"]["features"].values()) == (name == "all") and (d / "viewer.html").stat().st_size > 0
        assert json.loads((d / "summary.json").read_text())["steps"] == 1
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*_run0/summary.json")}
    again = ablate(opts, str(tmp_path), None, None, configs=("all", "none"), runs=1, agent_config=ac,
                   log=logs.append, executor=ExecutorConfig(executor="inline", progress=False))
    assert len(logs) == 2 and again["table"] == doc["table"]  # nothing replayed
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*_run0/summary.json")} == before
    with pytest.raises(ValueError, match="different configuration"):
        ablate(RunOptions(scenario="zombie", agents=2, steps=2, judge=False), str(tmp_path), None, None,
               configs=("all",), runs=1, agent_config=ac, executor=ExecutorConfig(executor="inline", progress=False))
