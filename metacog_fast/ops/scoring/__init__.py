"""Trajectory scoring (MUSE M_sa) and mean pooling (docs/design.md §1.3); see :mod:`.api`."""
from metacog_fast.ops.scoring.api import init_scoring_head, mean_pool_l2norm, score_trajectories

__all__ = ["init_scoring_head", "mean_pool_l2norm", "score_trajectories"]
