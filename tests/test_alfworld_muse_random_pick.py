"""MUSE-random with ``decode_only_pick``: the pick drawn first and only that rollout decoded executes
the actions that picking among all decoded rollouts executes. Real embedded LLM (llama.cpp, CPU),
real MiniLM scorer, ALFWorld-shaped prompts."""
from __future__ import annotations

import argparse

import pytest

from alfworld_helpers import HISTORY, THINKS, llm, muse_at, scorer  # noqa: F401 (fixtures)
from metacog_fast.alfworld.actions import ActionMapper
from metacog_fast.alfworld.agents import MuseAgent
from metacog_fast.alfworld.config import AgentConfig, RunConfig
from metacog_fast.alfworld.report import selection_counts


def make_random(llm, scorer, only_pick: bool | None, history: list) -> MuseAgent:
    cfg = AgentConfig(examples=0, rollouts=5, rollout_max_tokens=16, seed=7, decode_only_pick=only_pick)
    return muse_at(llm, scorer, cfg, "random", history=history)


# after actions the first line is an action (decoded up to its end); after think lines it is a think,
# and the picked rollout is decoded whole (the full step's action comes from a later pair)
@pytest.mark.starts_first(seconds=10)
@pytest.mark.parametrize("history", ["actions", "thinks"])
def test_decoding_only_the_pick_executes_the_same_actions(llm, scorer, history):
    steps = 2
    decisions, tokens, calls = [], [], []
    for only_pick in (None, True):
        agent = make_random(llm, scorer, only_pick, HISTORY + (THINKS if history == "thinks" else []))
        before = (llm.usage.completion_tokens, llm.usage.calls)
        decisions.append([agent.act(None) for _ in range(steps)])
        tokens.append(llm.usage.completion_tokens - before[0])
        calls.append(llm.usage.calls - before[1])
    a, b = decisions
    assert [d.info["chosen"] for d in b] == [d.info["chosen"] for d in a]
    assert [(d.action, d.proposed, d.how) for d in b] == [(d.action, d.proposed, d.how) for d in a]
    for da, db in zip(a, b):
        # the executed action is the picked rollout's first action, in both
        assert db.info["rollouts"][0][0][0] == da.info["rollouts"][da.info["chosen"]][0][0] == db.action
        assert len(db.info["rollouts"]) == 1 and len(db.info["scores"]) == 1 and db.info["decoded_only_pick"]
        assert "decoded_only_pick" not in da.info and len(da.info["rollouts"]) == 5
    if history == "actions":
        assert calls[1] == steps and tokens[1] < tokens[0] / 4
    else:  # first lines here are thinks: such a pick is decoded twice (to the line's end, then whole)
        assert calls[1] > steps and tokens[1] < tokens[0] / 2
    assert selection_counts([{"action": d.action, **d.info} for d in b]) is None
    assert selection_counts([{"action": d.action, **d.info} for d in a])["steps"] == steps


def test_decode_only_pick_is_refused_where_the_pick_needs_the_rollouts(scorer):
    with pytest.raises(ValueError, match="decode_only_pick"):
        MuseAgent(None, {}, AgentConfig(decode_only_pick=True), ActionMapper("none"), None, scorer, "highest")
    with pytest.raises(ValueError, match="decode_only_pick"):
        RunConfig(agent="muse-lowest", scorer="s", agent_config=AgentConfig(decode_only_pick=True)).validate()
    RunConfig(agent="muse-random", scorer="s", agent_config=AgentConfig(decode_only_pick=True)).validate()


def test_decode_only_pick_flag(tmp_path):
    from metacog_fast.alfworld.cli import add_run_arguments, run_config

    p = argparse.ArgumentParser()
    add_run_arguments(p)
    base = ["--agent", "muse-random", "--out", str(tmp_path / "x"), "--scorer", str(tmp_path)]  # --scorer must exist
    assert run_config(p.parse_args(base)).agent_config.decode_only_pick is None  # an older run's snapshot resumes
    assert run_config(p.parse_args(base + ["--decode-only-pick"])).agent_config.decode_only_pick is True
    assert run_config(p.parse_args(base + ["--no-decode-only-pick"])).agent_config.decode_only_pick is False
