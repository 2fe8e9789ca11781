"""MUSE's rollout seeds from (config seed, game, episode, step) (``seed_scheme="episode"``, issue 49
item 6): two agents built apart draw the same rollouts (and MUSE-random the same pick) at the same
game/episode/step whatever they played before. Real embedded LLM (llama.cpp, CPU), real MiniLM scorer."""
from __future__ import annotations

import pytest

from alfworld_helpers import HISTORY, llm, muse_at, place, scorer  # noqa: F401 (fixtures)
from metacog_fast.alfworld.agents import MuseAgent
from metacog_fast.alfworld.config import AgentConfig, step_seed

ROLLOUTS = 3


def agent(llm, scorer, select: str, scheme: str | None) -> MuseAgent:
    cfg = AgentConfig(examples=0, rollouts=ROLLOUTS, rollout_max_tokens=8, rollout_temperature=1.0, seed=5,
                      seed_scheme=scheme)
    return muse_at(llm, scorer, cfg, select, game="other_game", history=[])


def test_step_seed_is_a_function_of_game_episode_step():
    s = step_seed(5, "g", 1, 2)
    assert s == step_seed(5, "g", 1, 2) and 0 <= s < 2**31
    others = {step_seed(6, "g", 1, 2), step_seed(5, "h", 1, 2), step_seed(5, "g", 0, 2), step_seed(5, "g", 1, 3)}
    assert s not in others and len(others) == 4


@pytest.mark.parametrize("select", ["highest", "random"])
def test_same_step_same_rollouts_whatever_was_played_before(llm, scorer, select):
    a, b = agent(llm, scorer, select, "episode"), agent(llm, scorer, select, "episode")
    a.act(None)  # a plays two steps of another game first
    a.step_index = 7
    a.act(None)
    place(a, "g", 1, HISTORY)
    place(b, "g", 1, HISTORY)
    da, db = a.act(None), b.act(None)
    assert da.info["rollout_seed"] == db.info["rollout_seed"] == step_seed(5, "g", 1, len(HISTORY))
    assert da.info["rollouts"] == db.info["rollouts"] and da.info["chosen"] == db.info["chosen"]
    assert da.action == db.action
    # the worker scheme (run 3) depends on what the agent played before: its counter moved on
    wa, wb = agent(llm, scorer, select, None), agent(llm, scorer, select, None)
    wa.act(None)
    place(wa, "g", 1, HISTORY)
    place(wb, "g", 1, HISTORY)
    dwa, dwb = wa.act(None), wb.act(None)
    assert "rollout_seed" not in dwa.info and "rollout_seed" not in dwb.info
    assert wa.step_seed == 5 + 2 * ROLLOUTS != wb.step_seed == 5 + ROLLOUTS
