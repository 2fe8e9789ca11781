"""RSSM + actor + self-assessment parameters as an ``nn.Module`` whose ``state_dict`` keys
are exactly the SPEC §1.1 names ("img_in.w", "gru.ln.g", "actor.0.w", "sa.out.b", ...).

The forward maths lives in :mod:`metacog_fast.kernels.reference.rssm`; this module only owns
the tensors, so ``module.weights()`` can be handed to the reference functions (autograd) and
``module.numpy_weights()`` to the fused kernels (acting).
"""
from __future__ import annotations

from typing import Mapping

import numpy as np
import torch
from torch import nn

from metacog_fast.kernels.rssm import init_rssm_weights


class _Node(nn.Module):
    """A plain container: its parameters and children give dotted state_dict names."""


class RssmParams(nn.Module):
    """Holds a SPEC-named weights mapping as parameters.

    Built from ``init_rssm_weights(...)`` keyword arguments (preset, D, Hd, S, C, A, E, L, N, seed)
    or from an existing mapping via :meth:`from_weights`.
    """

    def __init__(self, weights: Mapping[str, np.ndarray] | None = None, **init_kwargs) -> None:
        super().__init__()
        w = dict(weights) if weights is not None else init_rssm_weights(**init_kwargs)
        self._names: list[str] = []
        for name, arr in w.items():
            self._put(name, nn.Parameter(torch.as_tensor(np.asarray(arr, dtype=np.float32)).clone()))
            self._names.append(name)

    def _put(self, name: str, p: nn.Parameter) -> None:
        parts = name.split(".")
        node: nn.Module = self
        for part in parts[:-1]:
            child = node._modules.get(part)
            if child is None:
                child = _Node()
                node.add_module(part, child)
            node = child
        node.register_parameter(parts[-1], p)

    @classmethod
    def from_weights(cls, weights: Mapping[str, np.ndarray]) -> "RssmParams":
        return cls(weights)

    def weights(self) -> dict[str, torch.Tensor]:
        """name -> parameter tensor (with grad), SPEC names."""
        return dict(self.named_parameters())

    def numpy_weights(self) -> dict[str, np.ndarray]:
        """name -> float32 C-contiguous copy (for the fused kernels)."""
        return {k: np.ascontiguousarray(v.detach().cpu().numpy(), dtype=np.float32) for k, v in self.named_parameters()}

    def group(self, prefix: str) -> list[nn.Parameter]:
        """Parameters whose name starts with ``prefix + '.'`` (e.g. "actor", "sa")."""
        return [p for k, p in self.named_parameters() if k.startswith(prefix + ".")]
