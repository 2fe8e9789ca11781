"""Shared setup of the ALFWorld agent tests: one room, one task and a short executed history
(ALFWorld-shaped prompts without few-shot examples), the embedded SmolLM2 as a module fixture, one
MiniLM encoder and untrained scorer per test process, and a MUSE agent put in the middle of an episode
without the plan LLM call. Imported as a plain module (``from alfworld_helpers import ...``: pytest's
default import mode puts tests/ on sys.path for the test modules here, under xdist too)."""
from __future__ import annotations

import functools
from typing import Any

import pytest

from metacog_fast.alfworld import prompts
from metacog_fast.alfworld.actions import ActionMapper
from metacog_fast.alfworld.agents import EpisodeContext, MuseAgent
from metacog_fast.alfworld.config import AgentConfig

INTRO = ("You are in the middle of a room. Looking quickly around you, you see a countertop 1, a fridge 1 and "
         "a microwave 1.\n\nYour task is to: heat some egg and put it in countertop.")
TASK = "Your task is to: heat some egg and put it in countertop."
TYPE = "pick_heat_then_place_in_recep"
PLAN = "1. take the egg. 2. heat it."
HISTORY = [("go to fridge 1", "The fridge 1 is closed."), ("open fridge 1", "You open the fridge 1. In it, you "
           "see a egg 1.")]
"""Two executed steps: the actor's next line is an action."""
THINKS = [("think: First I need to find an egg.", "OK."), ("think: An egg is likely in the fridge.", "OK."),
          ("think: I will check the fridge first.", "OK.")]
"""Think lines after ``HISTORY``: the actor's next line is a think."""


@pytest.fixture(scope="module")
def llm():
    """The embedded SmolLM2-135M on one thread (a worker's share of a 2-core machine)."""
    from metacog_fast.llm import open_llm

    m = open_llm("llama-cpp://", n_threads=1)
    yield m
    m.close()


@functools.lru_cache(maxsize=1)
def shared_scorer() -> Any:
    """One untrained M_sa (``ScorerConfig(seed=3)``) on the real MiniLM encoder per test process:
    loading MiniLM costs seconds of CPU, and its users only score with it (nothing fits this head;
    a test that trains a scorer makes its own, on :func:`shared_encoder` if it likes)."""
    from metacog_fast.scoring import ScorerConfig, TrajectoryScorer

    return TrajectoryScorer(ScorerConfig(seed=3))


def shared_encoder() -> Any:
    """The MiniLM encoder of :func:`shared_scorer` (the default ``EncoderConfig``, as ``MiniLMEncoder()``
    makes it), for tests that only encode with it."""
    return shared_scorer().encoder


@pytest.fixture(scope="module")
def scorer():
    """:func:`shared_scorer` (untrained, seeded; only scored with)."""
    return shared_scorer()


def muse_at(llm: Any, scorer: Any, config: AgentConfig, select: str = "highest", memory: Any = None,
            history: list[tuple[str, str]] | None = None, game: str = "g", episode: int = 0,
            plan: str = PLAN) -> MuseAgent:
    """A MUSE agent with no few-shot examples at step ``len(history)`` (default ``HISTORY``) of
    ``game``'s episode ``episode``, its plan set (no plan LLM call) and its prompt's fixed part built
    as ``begin`` builds it."""
    a = MuseAgent(llm, {TYPE: []}, config, ActionMapper("none"), memory, scorer, select)
    place(a, game, episode, HISTORY if history is None else history, plan)
    return a


def place(a: MuseAgent, game: str, episode: int, history: list[tuple[str, str]], plan: str = PLAN) -> None:
    """Put ``a`` at step ``len(history)`` of ``game``'s episode ``episode`` (no plan LLM call)."""
    a.ctx = EpisodeContext(game, TASK, TYPE, INTRO, episode)
    a.current_plan = plan
    a.prefix = prompts.actor_prefix([], INTRO, [], a.plan())
    a.lines, a.executed = list(history), list(history)
    a.step_index = len(history)
