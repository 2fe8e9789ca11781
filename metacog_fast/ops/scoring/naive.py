"""Torch reference of the trajectory-scoring kernels (docs/design.md §1.3, MUSE M_sa).

Pure functions, written for reading; autograd differentiates them, and every
compiled backend (cpu, triton) is tested against them.

Head ``g_eta`` is a mapping ``name -> tensor``::

    l0.w [H0, Dtr+Dta]  l0.b [H0]      x0 = silu(l0.w @ concat(traj, task) + l0.b)
    l{k}.w [Hk, Hk-1]   l{k}.b [Hk]    x_k = silu(l{k}.w @ x_{k-1} + l{k}.b)
    out.w [1, H_last]   out.b [1]      p = sigmoid(out.w @ x_last + out.b)

Default sizes 768 -> 256 -> 64 -> 1 (Dtr = Dta = 384, MiniLM embeddings).
"""
from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F

POOL_MASK_EPS = 1e-9
"""Lower bound of the mask sum in mean pooling (sentence-transformers' clamp)."""
L2_EPS = 1e-12
"""Lower bound of the norm in L2 normalisation (torch.nn.functional.normalize)."""

Head = Mapping[str, torch.Tensor]


def head_layers(head: Head) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The (weight, bias) pairs of ``head`` in order: l0, l1, ..., out."""
    layers = []
    k = 0
    while f"l{k}.w" in head:
        layers.append((head[f"l{k}.w"], head[f"l{k}.b"]))
        k += 1
    layers.append((head["out.w"], head["out.b"]))
    return layers


Layers = list[tuple[torch.Tensor, torch.Tensor]]


def layers_logits(task_emb: torch.Tensor, traj_emb: torch.Tensor, layers: Layers) -> torch.Tensor:
    """Logits of M_sa before the sigmoid, the head given as its (weight, bias) pairs.

    task_emb [B or 1, Dta], traj_emb [B, Dtr] -> [B]. The input is
    ``concat(traj_emb, task_emb)`` = concat(M(tau ⊕ P), M(I)) (docs/design.md §1.3 order).
    """
    task = task_emb.expand(traj_emb.shape[0], -1)
    x = torch.cat([traj_emb, task], dim=-1)
    for w, b in layers[:-1]:
        x = F.silu(x @ w.T + b)
    w, b = layers[-1]
    return (x @ w.T + b).squeeze(-1)


def score_layers(task_emb: torch.Tensor, traj_emb: torch.Tensor, layers: Layers) -> torch.Tensor:
    """p [B] = sigmoid(layers_logits(...)): the function every backend implements."""
    return torch.sigmoid(layers_logits(task_emb, traj_emb, layers))


def score_logits(task_emb: torch.Tensor, traj_emb: torch.Tensor, head: Head) -> torch.Tensor:
    """Logits of M_sa before the sigmoid: task_emb [B or 1, Dta], traj_emb [B, Dtr] -> [B]."""
    return layers_logits(task_emb, traj_emb, head_layers(head))


def score_trajectories(task_emb: torch.Tensor, traj_emb: torch.Tensor, head: Head) -> torch.Tensor:
    """p [B] = sigmoid(g_eta(concat(traj_emb [B, Dtr], task_emb [B or 1, Dta])))."""
    return torch.sigmoid(score_logits(task_emb, traj_emb, head))


def mean_pool_l2norm(token_emb: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean over tokens, then L2 normalisation (sentence-transformers' Pooling + Normalize).

    token_emb [B, T, D], mask [B, T] (1 = real token, 0 = padding) -> [B, D].
    """
    m = mask.to(token_emb.dtype).unsqueeze(-1)
    summed = (token_emb * m).sum(dim=1)
    count = m.sum(dim=1).clamp(min=POOL_MASK_EPS)
    return F.normalize(summed / count, p=2, dim=-1, eps=L2_EPS)
