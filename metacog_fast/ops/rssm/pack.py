"""Weights packed for the GPU kernels (shared by the cuda and triton glue; needs torch only).

``dims_of(w)`` reads the sizes the kernels need (:class:`~metacog_fast.ops.rssm.sizes.RssmSizes` with
z as one group: the kernels take S and C from ``u``); ``packed(w, "actor" | "sa")`` stacks an MLP's
layers; ``check_tensor`` / ``weights_on`` validate what goes to a launch, naming the argument.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

from metacog_fast.ops.rssm.sizes import RssmSizes, read_sizes


def dims_of(w: Mapping[str, torch.Tensor]) -> RssmSizes:
    """Sizes of ``w`` for the GPU kernels (S=1, C=Z); raises naming the weight, and ``ValueError``
    unless the actor and the self-assessment MLP have the same number of hidden layers."""
    sz = read_sizes(w, None)
    sz.L  # noqa: B018 - the kernels need L_actor == L_sa; raises otherwise
    return sz


@dataclass
class PackedMLP:
    """An MLP ``L x (linear, LN, SiLU)`` + output linear, packed for the kernels.

    ``w0 [Hd, D+Z]``, ``wh [max(L-1,1), Hd, Hd]``, ``b, g, be [L, Hd]``, ``wo [No, Hd]``, ``bo [No]``.
    """

    w0: torch.Tensor
    wh: torch.Tensor
    b: torch.Tensor
    g: torch.Tensor
    be: torch.Tensor
    wo: torch.Tensor
    bo: torch.Tensor


def _pack_mlp(w: Mapping[str, torch.Tensor], prefix: str, L: int) -> PackedMLP:
    w0 = w[f"{prefix}.0.w"].contiguous()
    Hd = w0.shape[0]
    if L > 1:
        wh = torch.stack([w[f"{prefix}.{i}.w"] for i in range(1, L)]).contiguous()
    else:
        wh = torch.zeros(1, Hd, Hd, device=w0.device, dtype=torch.float32)
    b = torch.stack([w[f"{prefix}.{i}.b"] for i in range(L)]).contiguous()
    g = torch.stack([w[f"{prefix}.{i}.ln.g"] for i in range(L)]).contiguous()
    be = torch.stack([w[f"{prefix}.{i}.ln.b"] for i in range(L)]).contiguous()
    return PackedMLP(w0, wh, b, g, be, w[f"{prefix}.out.w"].contiguous(), w[f"{prefix}.out.b"].contiguous())


_PACK_CACHE: dict = {}


def packed(w: Mapping[str, torch.Tensor], prefix: str) -> PackedMLP:
    """Packed ``actor``/``sa`` weights, cached until any source tensor changes (data_ptr or version)."""
    dims = dims_of(w)
    names = sorted(k for k in w if k.startswith(prefix + "."))
    key = (prefix, tuple((k, w[k].data_ptr(), w[k]._version, tuple(w[k].shape)) for k in names))
    hit = _PACK_CACHE.get(key)
    if hit is None:
        if len(_PACK_CACHE) > 32:
            _PACK_CACHE.clear()
        hit = _pack_mlp(w, prefix, dims.L)
        _PACK_CACHE[key] = hit
    return hit


def check_tensor(x: torch.Tensor, name: str, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """Float32, on ``device``, with ``shape``; returns a contiguous view. Raises naming ``name``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(x).__name__}")
    if x.dtype != torch.float32:
        raise TypeError(f"{name}: expected dtype float32, got {x.dtype}")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}: expected shape {list(shape)}, got {list(x.shape)}")
    if x.device != device:
        raise ValueError(f"{name}: expected a tensor on {device}, got {x.device}")
    return x.contiguous()


def weights_on(w: Mapping[str, torch.Tensor], names: list[str], device: torch.device) -> list[torch.Tensor]:
    """``w[name]`` for each name, checked float32 on ``device`` (contiguous); raises naming the weight."""
    out = []
    for n in names:
        if n not in w:
            raise KeyError(f"w: missing weight {n!r} (docs/design.md §1.1 names)")
        t = w[n]
        if t.dtype != torch.float32 or t.device != device:
            raise TypeError(f"w[{n!r}]: expected float32 on {device}, got {t.dtype} on {t.device}")
        out.append(t.contiguous())
    return out


def split_u(u: torch.Tensor, name: str, lead: tuple[int, ...], Z: int, classes: int | None = None) -> tuple[int, int]:
    """(S, C) read off the uniforms ``u [*lead, S]``; ``classes``, when given, must agree (C = Z / S)."""
    if u.dim() != len(lead) + 1 or tuple(u.shape[:-1]) != lead:
        raise ValueError(f"{name}: expected shape {list(lead) + ['S']}, got {list(u.shape)}")
    S = int(u.shape[-1])
    if S < 1 or Z % S:
        raise ValueError(f"{name}: last axis S={S} must divide Z={Z} (Z = S*C)")
    if classes is not None and int(classes) * S != Z:
        raise ValueError(f"classes: {classes} classes x S={S} groups ({name}'s last axis) != Z={Z}")
    return S, Z // S


def prior_sample(w: Mapping[str, torch.Tensor], h: torch.Tensor, u: torch.Tensor | None,
                 classes: int | None) -> torch.Tensor:
    """z_t ~ prior(h) [B, Z] with the reference (self_regulate without z_t: a sample the kernels
    take as input); ``u [B, S]`` is required."""
    from metacog_fast.ops.rssm import naive

    if u is None:
        raise ValueError("u: needed to sample z_t from the prior when z is None")
    logits = naive.prior_logits(w, h)
    _, C = split_u(u, "u", (h.shape[0],), logits.shape[-1], classes)
    return naive.sample_categorical(logits, u, C)
