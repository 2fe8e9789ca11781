"""A small trainable RSSM (+ actor + self-assessment head) as a ``torch.nn.Module``.

Its ``state_dict`` keys are exactly the docs/design.md §1.1 weight names (``"img_in.w"``,
``"gru.ln.g"``, ``"sa.out.b"`` ...), so a checkpoint loads into the fast kernels
(``metacog_fast.kernels``) or into another project without this class. Every
forward calls the torch reference (metacog_fast/ops/rssm/naive.py), so
training and the kernels share one definition of the maths.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch import nn

from metacog_fast.ops.rssm import naive as ref
from metacog_fast.ops.rssm.sizes import read_sizes
from metacog_fast.ops.rssm.weights import init_rssm_weights


class _LayerNorm(nn.Module):
    """LayerNorm parameters ``g`` [n] and ``b`` [n] (eps 1e-3 lives in the reference)."""

    def __init__(self, g: torch.Tensor, b: torch.Tensor) -> None:
        super().__init__()
        self.g = nn.Parameter(g)
        self.b = nn.Parameter(b)


class _Dense(nn.Module):
    """Parameters ``w`` [out, in], optional ``b`` [out] and optional ``ln``."""

    def __init__(self, arrays: Mapping[str, np.ndarray], name: str) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.from_numpy(arrays[f"{name}.w"].copy()))
        if f"{name}.b" in arrays:
            self.b = nn.Parameter(torch.from_numpy(arrays[f"{name}.b"].copy()))
        if f"{name}.ln.g" in arrays:
            self.ln = _LayerNorm(
                torch.from_numpy(arrays[f"{name}.ln.g"].copy()), torch.from_numpy(arrays[f"{name}.ln.b"].copy())
            )


def _mlp(arrays: Mapping[str, np.ndarray], prefix: str) -> nn.ModuleDict:
    names = sorted({k.split(".")[1] for k in arrays if k.startswith(prefix + ".")})
    return nn.ModuleDict({n: _Dense(arrays, f"{prefix}.{n}") for n in names})


class RSSM(nn.Module):
    """DreamerV3 RSSM with actor and MUSE self-assessment head.

    Built from ``init_rssm_weights(preset, **sizes)`` or from an existing
    ``weights`` mapping (numpy arrays or tensors with the docs/design.md §1.1 names).
    ``classes`` = C, the classes per categorical group.
    """

    def __init__(
        self,
        preset: str | None = "XS",
        *,
        weights: Mapping[str, np.ndarray | torch.Tensor] | None = None,
        classes: int = 32,
        **sizes: int,
    ) -> None:
        super().__init__()
        if weights is None:
            arrays = init_rssm_weights(preset, C=classes, **sizes)
        else:
            arrays = {
                k: (v.detach().cpu().float().numpy() if isinstance(v, torch.Tensor) else np.asarray(v, np.float32))
                for k, v in weights.items()
            }
        self.classes = classes
        for name in ("img_in", "gru", "img_out", "img_logits", "obs_out", "obs_logits"):
            setattr(self, name, _Dense(arrays, name))
        self.actor = _mlp(arrays, "actor")
        self.sa = _mlp(arrays, "sa")
        self.sizes = read_sizes(self.weights(), classes)

    def weights(self) -> dict[str, torch.Tensor]:
        """name -> parameter (live, differentiable), the mapping the reference functions take."""
        return dict(self.named_parameters())

    def kernel_weights(self) -> dict[str, np.ndarray]:
        """Detached float32 numpy copy for the compiled kernels (metacog_fast.kernels)."""
        return {k: v.detach().cpu().float().numpy().copy() for k, v in self.named_parameters()}

    def img_step(self, h: torch.Tensor, z: torch.Tensor, a: torch.Tensor, u: torch.Tensor):
        """-> (h' [B, D], z' [B, Z] straight-through one-hot, prior logits [B, Z])."""
        w = self.weights()
        h2 = ref.sequence_model(w, h, z, a)
        logits = ref.prior_logits(w, h2)
        return h2, ref.sample_categorical(logits, u, self.classes, straight_through=True), logits

    def obs_step(self, h: torch.Tensor, z: torch.Tensor, a: torch.Tensor, embed: torch.Tensor, u: torch.Tensor):
        """-> (h' [B, D], z' [B, Z] straight-through posterior sample, post logits [B, Z], prior logits [B, Z])."""
        w = self.weights()
        h2 = ref.sequence_model(w, h, z, a)
        post = ref.posterior_logits(w, h2, embed)
        return h2, ref.sample_categorical(post, u, self.classes, straight_through=True), post, ref.prior_logits(w, h2)

    def self_assess_logits(self, h: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """Self-assessment logits [B, N] (train with BCE-with-logits per quantile)."""
        return ref.sa_logits(self.weights(), torch.cat([h, z], -1))

    def forward(self, h: torch.Tensor, z: torch.Tensor, a: torch.Tensor, u: torch.Tensor):
        return self.img_step(h, z, a, u)
