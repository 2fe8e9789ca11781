"""Trajectory scoring: MUSE's language self-assessment M_sa (docs/design.md §1.3).

:class:`TrajectoryScorer` (score / fit / fit_incremental / save / load), the MiniLM
encoder with its caches, episode chunking, and the ALFWorld chunk dataset.
"""
from __future__ import annotations

from metacog_fast.scoring.chunks import chunk_episode, render_chunk, render_trajectory
from metacog_fast.scoring.config import ScorerConfig
from metacog_fast.scoring.encoder import EncoderConfig, MiniLMEncoder
from metacog_fast.scoring.replay import ReplayBuffer
from metacog_fast.scoring.scorer import TrajectoryScorer

__all__ = [
    "EncoderConfig",
    "MiniLMEncoder",
    "ReplayBuffer",
    "ScorerConfig",
    "TrajectoryScorer",
    "chunk_episode",
    "render_chunk",
    "render_trajectory",
]
