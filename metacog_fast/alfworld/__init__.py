"""ALFWorld language agents (paper 000 §4, paper 002; docs/design.md §3 "ALFWorld LLM agents").

ReAct, Reflexion, MUSE (+ MUSE-lowest / MUSE-random controls) and FCRF over the embedded
LLM runtime, with few-shot examples generated from ``train`` walkthroughs, an optional
mapping of proposed actions to admissible commands, the pre-deployment / adaptation / test
protocol with per-episode persistence, and the paper's tables. See ``docs/alfworld_agents.md``.
"""
from __future__ import annotations

from metacog_fast.alfworld.config import AGENT_NAMES, AgentConfig, RunConfig

__all__ = ["AGENT_NAMES", "AgentConfig", "RunConfig"]
