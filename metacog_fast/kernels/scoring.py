"""The ``scoring`` op under its earlier import path ``metacog_fast.kernels.scoring``.

Its home is ``metacog_fast/ops/scoring/`` (API and dispatch table in ``api.py``, the torch
reference in ``naive.py``, the backend glue beside them); this module re-exports its public
names so that code written against the earlier layout keeps working."""
from metacog_fast.ops.scoring import (  # noqa: F401 - re-exported
    init_scoring_head,
    mean_pool_l2norm,
    score_trajectories,
)

__all__ = ["init_scoring_head", "mean_pool_l2norm", "score_trajectories"]
