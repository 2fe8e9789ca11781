"""ScienceWorld dual-process agent (paper 004, docs/design.md §3): Swift proposer, Sage planner with a FIFO
action buffer, AMM episodic memory and SRM self-reflection, as four feature-flag configurations.

>>> from metacog_fast.scienceworld import CONFIGS, run_episode
See docs/scienceworld_agent.md.
"""
from __future__ import annotations

from metacog_fast.scienceworld.config import CONFIGS, AgentConfig, config_for
from metacog_fast.scienceworld.agent import DualProcessAgent, run_episode

__all__ = ["AgentConfig", "CONFIGS", "config_for", "DualProcessAgent", "run_episode"]
