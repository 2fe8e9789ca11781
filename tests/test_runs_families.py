"""Families on the one harness beyond ALFWorld, ScienceWorld and experience memory (whose own
tests run through it): the town-sim ablation as resumable tasks with the embedded model, and the
Meta-World agents as tasks (parallel, resumed from the checkpoint files they sent back)."""
from __future__ import annotations

import json

import pytest

from metacog_fast.town.generative import AgentConfig
from metacog_fast.llm.models import models_identity
from metacog_fast.runs import ExecutorConfig
from metacog_fast.town.runner import AblationOptions, RunOptions, ablate


def test_sim_ablation_runs_resume_and_keep_their_files(tmp_path):
    opts = RunOptions(scenario="zombie", agents=2, steps=1, judge=False)
    ac = AgentConfig(progress_every=1)
    logs: list[str] = []
    doc = ablate(opts, str(tmp_path), None, None, AblationOptions(configs=("all",), runs=1), agent_config=ac,
                 log=logs.append, executor=ExecutorConfig(executor="inline", progress=False))
    assert set(doc["table"]) == {"all"} and len(logs) == 1
    for name in ("all",):
        d = tmp_path / f"{name}_run0"
        run = json.loads((d / "run.json").read_text())
        assert all(run["config"]["features"].values()) == (name == "all") and (d / "viewer.html").stat().st_size > 0
        assert json.loads((d / "summary.json").read_text())["steps"] == 1
    assert json.loads((tmp_path / "config.json").read_text())["identity"] == models_identity(llm=None)
    before = {p.name: p.read_bytes() for p in tmp_path.glob("*_run0/summary.json")}
    again = ablate(opts, str(tmp_path), None, None, AblationOptions(configs=("all",), runs=1), agent_config=ac,
                   log=logs.append, executor=ExecutorConfig(executor="inline", progress=False))
    assert len(logs) == 1 and again["table"] == doc["table"]  # nothing replayed
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*_run0/summary.json")} == before
    with pytest.raises(ValueError, match="different configuration"):
        ablate(RunOptions(scenario="zombie", agents=2, steps=2, judge=False), str(tmp_path), None, None,
               AblationOptions(configs=("all",), runs=1), agent_config=ac, executor=ExecutorConfig(executor="inline", progress=False))


def test_sim_ablation_plays_the_scenarios_own_agents_and_asks_the_culprit_without_the_judge(tmp_path):
    """agents=None plays the scenario's own agents; the report names how many (it said "None"). The
    culprit question is the mystery's primary metric, not the judge's input: a run without the judge
    asks it (and nothing else) of every living agent (the control ablation had asked nobody)."""
    from metacog_fast.town.runner import load_scenario

    doc = ablate(RunOptions(scenario="mystery", agents=None, steps=1, judge=False), str(tmp_path), None, None,
                 AblationOptions(configs=("none",), runs=1), agent_config=AgentConfig(progress_every=1),
                 log=lambda _: None, executor=ExecutorConfig(executor="inline", progress=False))
    n = len(load_scenario("mystery").agents)
    assert doc["agents"] == n and doc["runs_detail"]["none"][0]["agents"] == n
    assert f"# Ablation: mystery ({n} agents, 1 steps" in (tmp_path / "ablation.md").read_text()
    ev = json.loads((tmp_path / "none_run0" / "evaluation.json").read_text())
    assert "judge" not in ev and {x["answer_type"] for x in ev["interviews"]} == {"agents"}
    culprit = json.loads((tmp_path / "none_run0" / "summary.json").read_text())["metrics"]["culprit"]
    assert culprit["asked"] == len(ev["interviews"]) - 1 == n - 1 and 0.0 <= culprit["probability"] <= 1.0


def test_metaworld_agents_as_tasks_match_direct_runs_and_resume(tmp_path):
    pytest.importorskip("metaworld")
    from dataclasses import replace

    import numpy as np

    from metacog_fast.metaworld.train.config import profile
    from metacog_fast.metaworld.train.runner import ProtocolRunner
    from metacog_fast.metaworld.train.tasks import run_agents

    def tiny(agent):
        cfg = profile("smoke", agent=agent)
        cfg.scripted = replace(cfg.scripted, episodes_per_task=1)
        return cfg

    agents = {"muse": tiny("muse"), "dreamer": tiny("dreamer")}
    states = run_agents(tmp_path / "run", agents, ExecutorConfig(executor="process", workers=2, progress=False))
    for name in agents:  # the checkpoint, the pre-trained weights and the replay came back to the run folder
        d = tmp_path / "run" / name
        assert (d / "ckpt" / "latest.json").is_file() and (d / "pretrained.safetensors").is_file()
        assert len(list((d / "replay" / "pretrain").glob("ep_*.npz"))) == len(agents[name].train_tasks) * 1 + 2
        assert json.loads((d / "state.json").read_text())["phase"] == "done"
    direct = ProtocolRunner(tiny("muse"), tmp_path / "direct", progress=False).run()
    got = states["muse"]
    assert got["updates"] == direct["updates"] and got["env_steps"] == direct["env_steps"]
    for a, b in zip(direct["records"], got["records"]):
        assert a["task"] == b["task"] and a["success"] == b["success"]
        np.testing.assert_allclose(a["return"], b["return"], rtol=1e-5)
    before = (tmp_path / "run" / "muse" / "ckpt" / "latest.safetensors").read_bytes()
    assert run_agents(tmp_path / "run", agents, ExecutorConfig(executor="inline", progress=False)) == states
    assert (tmp_path / "run" / "muse" / "ckpt" / "latest.safetensors").read_bytes() == before  # not retrained
    with pytest.raises(ValueError, match="different configuration"):
        run_agents(tmp_path / "run", {"muse": tiny("dreamer")})


def test_metaworld_task_killed_mid_training_resumes_from_the_returned_checkpoint(tmp_path):
    """The driver (training inline in a scratch folder) is killed mid-adaptation; the run folder
    holds only what came back as side files, and the resumed run matches an uninterrupted one."""
    pytest.importorskip("metaworld")
    import signal
    import subprocess
    import sys
    import time
    from dataclasses import replace

    import numpy as np

    from metacog_fast.metaworld.train.config import profile
    from metacog_fast.metaworld.train.runner import ProtocolRunner, read_state
    from metacog_fast.metaworld.train.tasks import run_agents

    def cfg():
        c = profile("smoke", agent="muse", adapt_episodes=4)
        c.scripted = replace(c.scripted, episodes_per_task=2)
        return c

    root = tmp_path / "run"
    code = ("from dataclasses import replace; from metacog_fast.metaworld.train.config import profile;"
            "from metacog_fast.metaworld.train.tasks import run_agents; from metacog_fast.runs import ExecutorConfig;"
            "c = profile('smoke', agent='muse', adapt_episodes=4); c.scripted = replace(c.scripted, episodes_per_task=2);"
            f"run_agents({str(root)!r}, {{'muse': c}}, ExecutorConfig(executor='inline', progress=False))")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    killed = None
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        try:
            st = read_state(root / "muse")
        except (OSError, ValueError, KeyError):
            st = None
        if st is not None and st["phase"] == "adapt" and len(st["records"]) >= 1:
            proc.send_signal(signal.SIGKILL)
            killed = st
            break
        time.sleep(0.02)
    proc.wait()
    assert killed is not None, proc.stderr.read().decode()[-2000:]
    assert not (root / "muse" / "state.json").exists()
    st = run_agents(root, {"muse": cfg()}, ExecutorConfig(executor="inline", progress=False))["muse"]
    assert st["resumed"] == 1 and st["phase"] == "done"
    ref = ProtocolRunner(cfg(), tmp_path / "straight", progress=False).run()
    assert ref["updates"] == st["updates"] and ref["env_steps"] == st["env_steps"]
    for a, b in zip(ref["records"], st["records"]):
        assert a["task"] == b["task"] and a["success"] == b["success"]
        np.testing.assert_allclose(a["psi_sum_mean"], b["psi_sum_mean"], rtol=1e-5)
        np.testing.assert_allclose(a["return"], b["return"], rtol=1e-5)


def test_sim_ablation_with_its_own_judge_model(tmp_path):
    """``judge_uri``: a second model rates each run; its calls are counted apart from the agents'
    interviews, the summary names it, and the folder's identity records it."""
    from metacog_fast.town.evaluation import CRITERIA

    opts = RunOptions(scenario="zombie", agents=2, steps=1, judge=True)
    doc = ablate(opts, str(tmp_path), None, None, AblationOptions(configs=("none",), runs=1),
                 agent_config=AgentConfig(progress_every=1), log=lambda _: None,
                 executor=ExecutorConfig(executor="inline", progress=False), judge_uri="llama-cpp://")
    s = json.loads((tmp_path / "none_run0" / "summary.json").read_text())
    assert s["judge_model"].startswith("llama-cpp://") and s["judge_model"].endswith(".gguf")
    assert s["judge_cost"]["calls"] == len(CRITERIA)  # one rating per criterion, by the judge's model
    assert s["eval_cost"]["calls"] > 0  # the interviews, by the agents' model
    ev = json.loads((tmp_path / "none_run0" / "evaluation.json").read_text())
    assert ev["judge_model"] == s["judge_model"] and set(CRITERIA) <= set(ev["judge"])
    assert json.loads((tmp_path / "config.json").read_text())["identity"] == models_identity(llm=None, judge="llama-cpp://")
    assert doc["table"]["none"]
