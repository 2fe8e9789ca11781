"""The anchor of MUSE's batched step: the session-1 ``MuseAgent.select`` with one mapping (encoder)
call per rollout's first action, instead of the product's one batched ``ActionMapper.map_many``.

Used by bench/bench_alfworld_agents.py (the ``anchor`` rounds) and by
tests/test_alfworld_muse_speed_equivalence.py (the batched step computes what this computes).
Everything after the mapping (chunks, M_sa scores, the pick) is the agent's own code.
"""
from __future__ import annotations

from typing import Sequence

from metacog_fast.alfworld.agents import Decision, MuseAgent


def select_unbatched(agent: MuseAgent, texts: Sequence[str], admissible: Sequence[str] | None,
                     prompt: str = "") -> Decision:
    """``agent.select(texts, admissible, prompt)`` with the first actions mapped one
    ``agent.mapper.map`` call each (texts: the rollouts as the LLM wrote them)."""
    if not isinstance(agent, MuseAgent):
        raise TypeError(f"agent: expected a MuseAgent, got {type(agent).__name__}")

    def one_by_one(proposals: list[str], adm: Sequence[str] | None, p: str) -> list:
        return [agent.mapper.map(x, adm, p) for x in proposals]

    return agent._select(texts, admissible, prompt, map_firsts=one_by_one)
