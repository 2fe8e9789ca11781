"""ALFWorld agents end to end with the embedded SmolLM2 and the real environment: the protocol
on 2 games, resume after a kill, MUSE rollouts scored by a real TrajectoryScorer, Reflexion and
FCRF reflections through the memory store, `won` vs `done`, and the report."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from alfworld_helpers import shared_encoder
from metacog_fast.alfworld.config import AgentConfig, RunConfig
from metacog_fast.alfworld.protocol import (DEFAULT_FEWSHOT, expert_examples, load_records, record_path,
                                                   run_protocol, select_games)

REPO = Path(__file__).resolve().parents[1]
TINY = dict(examples=1, max_steps=2, action_max_tokens=12, max_thinks=1, reflection_max_tokens=12, plan_max_tokens=12,
            rollouts=2, rollout_max_tokens=12, rollout_pairs=2, example_max_steps=12)
BASE = {**TINY, "examples": 0}
"""TINY for a base actor prompted without few-shot examples (an example costs ~600 prompt tokens)."""


def _cli(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "metacog_fast", "run", "alfworld", "--agent", "react", "--tasks", "2",
            "--adapt-episodes", "0", "--episodes", "1", "--max-steps", "2", "--examples", "0", "--out", str(out), *extra]


def test_protocol_two_games_resume_after_kill(tmp_path):
    out = tmp_path / "react"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    proc = subprocess.Popen(_cli(out), cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    games = select_games("valid_train", 2)
    first = record_path(out, games[0]["game"], "test", 0)
    deadline = time.time() + 1200
    try:
        while not first.exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert first.exists(), proc.stderr.read().decode()[-2000:] if proc.poll() is not None else "no record in 1200 s"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = first.read_text()
    second = record_path(out, games[1]["game"], "test", 0)
    second_done = second.exists()  # the kill may land after the second episode too
    cfg = RunConfig(agent="react", tasks=2, adapt_episodes=0, test_episodes=1,
                    agent_config=AgentConfig(max_steps=2, examples=0))
    res = run_protocol(out, cfg)
    assert res["episodes_played"] == (0 if second_done else 1)
    assert first.read_text() == before  # the finished episode was not replayed
    for g in games:
        (rec,) = load_records(out, g["game"], [("test", 0)])
        assert rec["steps"] == 2 and rec["done"] is True and rec["won"] is False  # step limit: done, not won
        assert len(rec["pairs"]) == 2 and rec["llm"]["calls"] >= 2 and rec["llm"]["prompt_tokens"] > 0
        assert "### Example" not in rec["begin"]["prefix"]  # --examples 0 reached the prompt (the default is 2)
        assert rec["task"] in rec["begin"]["prefix"] and rec["task_type"] == g["task_type"]
        assert all(s["how"] in ("exact", "embed") for s in rec["step_log"])
    assert run_protocol(out, cfg)["episodes_played"] == 0  # everything done: nothing replayed
    with pytest.raises(ValueError, match="different configuration"):
        run_protocol(out, RunConfig(agent="react", tasks=2, adapt_episodes=0, test_episodes=2,
                                    agent_config=AgentConfig(max_steps=2, examples=0)))
    from metacog_fast.alfworld.report import report

    rep = report(out)["agents"]["react"]
    assert rep["episodes"] == 2 and rep["success_rate"] == 0.0 and rep["mean_steps_charged"] == 100.0
    assert "Table 3" in (out / "tables.md").read_text()


@pytest.fixture(scope="module")
def scorer_dir(tmp_path_factory):
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    games = select_games("valid_seen", 1)
    ex = expert_examples(games, "valid_seen", None)
    assert ex and all(e["label"] == 1.0 for e in ex)  # only won walkthroughs give positives
    neg = [{"task": ex[0]["task"], "plan": ex[0]["plan"], "label": 0.0,
            "chunk": [("look", "Nothing happens."), ("inventory", "You are not carrying anything.")]}]
    s = TrajectoryScorer(ScorerConfig(epochs=3), encoder=shared_encoder())
    s.fit(ex + neg)
    return s.save(tmp_path_factory.mktemp("scorer") / "scorer")


def test_muse_rollouts_scored_and_adapted(tmp_path, scorer_dir):
    cfg = RunConfig(agent="muse", tasks=1, adapt_episodes=1, test_episodes=1, scorer=str(scorer_dir),
                    agent_config=AgentConfig(**BASE))
    games = select_games("valid_train", 1)
    assert run_protocol(tmp_path, cfg)["episodes_played"] == 2
    adapt, test = load_records(tmp_path, games[0]["game"], [("adapt", 0), ("test", 0)])
    for rec in (adapt, test):
        assert rec["plan"].startswith("1.")
        for s in rec["step_log"]:
            assert len(s["scores"]) == 2 and len(s["rollouts"]) == 2
            assert all(0.0 <= p <= 1.0 for p in s["scores"])
            assert s["chosen"] == int(np.argmax(s["scores"]))
            assert s["action"] == s["rollouts"][s["chosen"]][0][0]
        assert len(rec["chunk_probs"]) == len(rec["chunk_probs_pre"]) == 1
    assert (tmp_path / "scorers" / games[0]["game"] / "head.safetensors").exists()
    # the adapted g_eta differs from the pre-deployment one on the same test chunk
    assert test["chunk_probs"] != test["chunk_probs_pre"]
    # reflections of MUSE episodes go to the memory store and into the next prompt
    assert adapt["end"]["reflection"] and adapt["end"]["reflection"] in test["begin"]["prefix"]


def test_reflexion_and_fcrf_reflections(tmp_path):
    from metacog_fast.alfworld.agents import EpisodeContext
    from metacog_fast.alfworld.fewshot import load_examples
    from metacog_fast.alfworld.memory import ReflectionMemory
    from metacog_fast.alfworld.protocol import make_agent
    from metacog_fast.llm import open_llm

    enc = shared_encoder()
    ac = AgentConfig(**TINY)
    ex = load_examples(DEFAULT_FEWSHOT)
    llm = open_llm(n_threads=1, n_ctx=4096)
    mem = ReflectionMemory(tmp_path / "m.db", enc)
    pairs = [("go to fridge 1", "The fridge 1 is closed."), ("open fridge 1", "You open the fridge 1.")]
    t = "pick_cool_then_place_in_recep"
    intro = ex[t][0]["intro"]
    task = [ln for ln in intro.splitlines() if ln.startswith("Your task")][0]

    refl = make_agent("reflexion", llm, ex, ac, enc, mem)
    for e in range(4):  # 4 reflections stored, the prompt carries the last 3
        refl.begin(EpisodeContext("g", task, t, intro, e))
        assert refl.end(e == 3, pairs)["reflection"]
    prefix = refl.begin(EpisodeContext("g", task, t, intro, 4))["prefix"]
    notes = mem.last("g", 10)
    section = prefix.split("Notes from your earlier attempts at this task:\n")[1].split("\n\n")[0]
    assert len(notes) == 4 and section.splitlines() == [f"- {n}" for n in notes[-3:]]
    assert prefix.count("### Example") == 1 and task in prefix

    fcrf = make_agent("fcrf", llm, ex, ac, enc, mem)
    fcrf.restore("f", [])
    fcrf.begin(EpisodeContext("f", task, t, intro, 0))
    fail = fcrf.end(False, pairs)
    assert fail["difficulty"] == 3 and fail["deep"] and fail["lesson"] in fcrf.pool.lessons(t)
    assert "Lesson:" in fail["reflection"] and "Plan:" in fail["reflection"]
    n = len(fcrf.pool.lessons(t))
    fcrf.begin(EpisodeContext("f", task, t, intro, 1))
    ok = fcrf.end(True, pairs + [("cool apple 1 with fridge 1", "You cool the apple 1 using the fridge 1.")])
    assert "lesson" not in ok  # no failure lesson after a success
    assert len(fcrf.pool.lessons(t)) == n + (1 if "new_lesson" in ok else 0)  # fail -> success grows the pool
    easy = "pick_and_place_simple"
    fcrf.begin(EpisodeContext("e", task, easy, ex[easy][0]["intro"], 0))
    light = fcrf.end(False, pairs)
    assert not light["deep"] and "lesson" not in light and "plan" not in light  # easy: summary only
    assert mem.last("f", 3)[-1] == ok["reflection"]
    mem.close()
    llm.close()
