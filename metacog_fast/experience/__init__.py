"""Experience-driven hierarchical memory (paper 003, MUSE "Learning on the Job").

Three memories (strategic, procedural SOPs, tool), a plan-execute agent and a reflect agent
that learn across tasks, and the continuous-learning / transfer / cross-model protocols.
See docs/experience_memory.md.
"""
from __future__ import annotations

from metacog_fast.experience.config import ExperienceConfig
from metacog_fast.experience.entries import SOP, Counts, Provenance, StrategicEntry, ToolEntry
from metacog_fast.experience.memory import ExperienceMemory

__all__ = ["ExperienceConfig", "ExperienceMemory", "SOP", "Counts", "Provenance", "StrategicEntry", "ToolEntry"]
