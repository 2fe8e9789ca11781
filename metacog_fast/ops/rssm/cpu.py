"""CPU glue of the RSSM op: ``metacog_fast._core.RssmCpu`` (csrc/cpu/rssm.cpp; fp32 or bf16
weights, per-ISA GEMV/GEMM, OpenMP over rows, the GIL released).

``prepare`` packs a validated weights mapping once (the API caches it per mapping); the op
functions then have the names and arguments of :mod:`metacog_fast.ops.rssm.naive` with that
packed object in place of the weights, on float32 C-contiguous numpy arrays. The stochastic
layout (S, C) is fixed at ``prepare``; ``classes`` is accepted for the common signature.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from metacog_fast._backend import core
from metacog_fast.ops.rssm.sizes import RssmSizes

ARRAYS = "numpy"
"""The array type this backend computes on (the API converts inputs to it)."""


def available() -> bool:
    """Whether this build of the core has the RSSM kernels."""
    return hasattr(core(), "RssmCpu")


def prepare(w: Mapping[str, np.ndarray], sz: RssmSizes, precision: str) -> Any:
    """The packed ``RssmCpu`` of float32 arrays ``w`` (``precision="bf16"``: bf16 weights)."""
    return core().RssmCpu(dict(w), sz.S, sz.C, precision == "bf16")


def img_step(obj: Any, h: np.ndarray, z: np.ndarray, a: np.ndarray, u: np.ndarray, classes: int | None = None):
    """(h' [B, D], z' [B, Z], prior logits [B, Z])."""
    return obj.img_step(h, z, a, u)


def obs_step(obj: Any, h: np.ndarray, z: np.ndarray, a: np.ndarray, embed: np.ndarray, u: np.ndarray,
             classes: int | None = None):
    """(h' [B, D], z' [B, Z], posterior logits [B, Z])."""
    return obj.obs_step(h, z, a, embed, u)


def imagine(obj: Any, h0: np.ndarray, z0: np.ndarray, eps: np.ndarray, u: np.ndarray, classes: int | None = None):
    """(hs [H, B, D], zs [H, B, Z], actions [H, B, A])."""
    return obj.imagine(h0, z0, eps, u)


def self_assess(obj: Any, s: np.ndarray, grad: bool = False):
    """psi [B, N], or (psi, d(sum psi)/ds [B, D+Z]) with ``grad``."""
    out = obj.self_assess(s, bool(grad))  # (psi,) or (psi, grad)
    return (out[0], out[1]) if grad else out[0]


def self_regulate(obj: Any, h: np.ndarray, z: np.ndarray | None, H: int, beta: float, eps: np.ndarray,
                  u: np.ndarray | None = None, classes: int | None = None, trace: bool = False):
    """(z_t [B, Z], a_t [B, A], h_next [B, D]) (+ psi trace [H, B, N]); z=None samples z_t with u."""
    zt, at, hn, tr = obj.self_regulate(h, z, int(H), float(beta), eps, u, bool(trace))
    return (zt, at, hn, tr) if trace else (zt, at, hn)
