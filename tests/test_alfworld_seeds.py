"""MUSE's rollout seeds from (config seed, game, episode, step) (``seed_scheme="episode"``, issue 49
item 6): two agents built apart draw the same rollouts (and MUSE-random the same pick) at the same
game/episode/step whatever they played before. Real embedded LLM (llama.cpp, CPU), real MiniLM scorer."""
from __future__ import annotations

import pytest

from metacog_fast.alfworld import prompts
from metacog_fast.alfworld.actions import ActionMapper
from metacog_fast.alfworld.agents import EpisodeContext, MuseAgent
from metacog_fast.alfworld.config import AgentConfig, step_seed

INTRO = ("You are in the middle of a room. Looking quickly around you, you see a countertop 1, a fridge 1 and "
         "a microwave 1.\n\nYour task is to: heat some egg and put it in countertop.")
TASK = "Your task is to: heat some egg and put it in countertop."
TYPE = "pick_heat_then_place_in_recep"


@pytest.fixture(scope="module")
def llm():
    from metacog_fast.llm import open_llm

    m = open_llm("llama-cpp://", n_threads=1)
    yield m
    m.close()


@pytest.fixture(scope="module")
def scorer():
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    return TrajectoryScorer(ScorerConfig(seed=3))


def agent(llm, scorer, select: str, scheme: str | None) -> MuseAgent:
    cfg = AgentConfig(examples=0, rollouts=3, rollout_max_tokens=12, rollout_temperature=1.0, seed=5,
                      seed_scheme=scheme)
    return MuseAgent(llm, {TYPE: []}, cfg, ActionMapper("none"), None, scorer, select)


def at(a: MuseAgent, game: str, episode: int, history: list[tuple[str, str]]) -> None:
    """Put ``a`` at step len(history) of ``game``'s episode ``episode`` (no plan LLM call)."""
    a.ctx = EpisodeContext(game, TASK, TYPE, INTRO, episode)
    a.current_plan = "1. take the egg."
    a.prefix = prompts.actor_prefix([], INTRO, [], None)
    a.lines, a.executed = list(history), list(history)
    a.step_index = len(history)


HISTORY = [("go to fridge 1", "The fridge 1 is closed.")]


def test_step_seed_is_a_function_of_game_episode_step():
    s = step_seed(5, "g", 1, 2)
    assert s == step_seed(5, "g", 1, 2) and 0 <= s < 2**31
    others = {step_seed(6, "g", 1, 2), step_seed(5, "h", 1, 2), step_seed(5, "g", 0, 2), step_seed(5, "g", 1, 3)}
    assert s not in others and len(others) == 4


@pytest.mark.parametrize("select", ["highest", "random"])
def test_same_step_same_rollouts_whatever_was_played_before(llm, scorer, select):
    a, b = agent(llm, scorer, select, "episode"), agent(llm, scorer, select, "episode")
    at(a, "other_game", 0, [])  # a plays two steps of another game first
    a.act(None)
    a.step_index = 7
    a.act(None)
    at(a, "g", 1, HISTORY)
    at(b, "g", 1, HISTORY)
    da, db = a.act(None), b.act(None)
    assert da.info["rollout_seed"] == db.info["rollout_seed"] == step_seed(5, "g", 1, 1)
    assert da.info["rollouts"] == db.info["rollouts"] and da.info["chosen"] == db.info["chosen"]
    assert da.action == db.action
    # the worker scheme (run 3) depends on what the agent played before: its counter moved on
    wa, wb = agent(llm, scorer, select, None), agent(llm, scorer, select, None)
    at(wa, "other_game", 0, [])
    wa.act(None)
    at(wa, "g", 1, HISTORY)
    at(wb, "g", 1, HISTORY)
    dwa, dwb = wa.act(None), wb.act(None)
    assert "rollout_seed" not in dwa.info and "rollout_seed" not in dwb.info
    assert wa.step_seed == 5 + 2 * 3 != wb.step_seed == 5 + 3
