"""CPU glue of the scoring op: ``metacog_fast._core.score_trajectories`` / ``mean_pool_l2norm``
(csrc/cpu/scoring.cpp: the concat never materialised, per-ISA dot products, the GIL released).

Same names and arguments as :mod:`metacog_fast.ops.scoring.naive` (``score_layers``,
``mean_pool_l2norm``), on contiguous float32 CPU tensors; forward only (the API differentiates
through the reference).
"""
from __future__ import annotations

import torch

from metacog_fast._backend import core


def _np(t: torch.Tensor):
    return t.detach().contiguous().numpy()


def score_layers(task_emb: torch.Tensor, traj_emb: torch.Tensor,
                 layers: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
    """p [B] from task_emb [B or 1, Dta], traj_emb [B, Dtr] and the (w, b) layers."""
    p = core().score_trajectories(_np(task_emb), _np(traj_emb), [_np(w) for w, _ in layers],
                                  [_np(b) for _, b in layers])
    return torch.from_numpy(p)


def mean_pool_l2norm(token_emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, D] from token_emb [B, T, D] and a float32 mask [B, T]."""
    return torch.from_numpy(core().mean_pool_l2norm(_np(token_emb), _np(mask)))
