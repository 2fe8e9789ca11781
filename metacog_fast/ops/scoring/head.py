"""The scoring head g_eta: its layout, a fresh one, and its checks (cached per head object).

Head names (``init_scoring_head`` defaults)::

    l0.w [256, 768] l0.b [256]  l1.w [64, 256] l1.b [64]  out.w [1, 64] out.b [1]
"""
from __future__ import annotations

import collections
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from metacog_fast.ops._alloc import check_alloc

ArrayLike = Any  # torch.Tensor | np.ndarray
Layers = list[tuple[torch.Tensor, torch.Tensor]]


def init_scoring_head(in_dim: int = 768, hidden: Sequence[int] = (256, 64), seed: int = 0) -> dict[str, torch.Tensor]:
    """A fresh head g_eta: ``in_dim -> hidden[0] -> ... -> 1``.

    Weights and biases drawn like ``torch.nn.Linear`` (U(-1/sqrt(fan_in), 1/sqrt(fan_in)))
    from a generator seeded with ``seed``. Returns ``{"l0.w", "l0.b", ..., "out.w", "out.b"}``
    as float32 tensors.
    """
    if int(in_dim) < 1:
        raise ValueError(f"in_dim: expected a positive size, got {in_dim}")
    if any(int(h) < 1 for h in hidden):
        raise ValueError(f"hidden: expected positive layer sizes, got {tuple(hidden)}")
    sizes = [int(in_dim), *(int(h) for h in hidden), 1]
    check_alloc("in_dim, hidden", 4 * sum(a * b + b for a, b in zip(sizes, sizes[1:])), "the head's weights")
    g = torch.Generator().manual_seed(int(seed))
    head: dict[str, torch.Tensor] = {}
    fan_in = int(in_dim)
    names = [f"l{k}" for k in range(len(hidden))] + ["out"]
    for name, out in zip(names, [*hidden, 1]):
        bound = 1.0 / float(np.sqrt(fan_in))
        head[f"{name}.w"] = (torch.rand(int(out), fan_in, generator=g) * 2 - 1) * bound
        head[f"{name}.b"] = (torch.rand(int(out), generator=g) * 2 - 1) * bound
        fan_in = int(out)
    return head


def as_float_tensor(x: ArrayLike, name: str, ndim: int, check_finite: bool = True) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        if not (np.issubdtype(x.dtype, np.floating)):
            raise TypeError(f"{name}: expected a floating array (float32), got dtype {x.dtype}")
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    elif isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"{name}: expected a floating tensor (float32), got dtype {x.dtype}")
        t = x.to(torch.float32)
    else:
        raise TypeError(f"{name}: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {list(t.shape)}")
    if check_finite and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: contains NaN or infinite values")
    return t


def check_head(head: Mapping[str, ArrayLike], in_dim: int) -> Layers:
    if not isinstance(head, Mapping):
        raise TypeError(f"head: expected a mapping name -> array, got {type(head).__name__}")
    for key in ("out.w", "out.b"):
        if key not in head:
            raise ValueError(f"head: missing {key!r} (expected l0.w, l0.b, ..., out.w, out.b)")
    layers = []
    k = 0
    prev = in_dim
    while True:
        name = f"l{k}" if f"l{k}.w" in head else "out"
        if f"{name}.b" not in head:
            raise ValueError(f"head: missing {name + '.b'!r}")
        w = as_float_tensor(head[f"{name}.w"], f"head[{name + '.w'!r}]", 2)
        b = as_float_tensor(head[f"{name}.b"], f"head[{name + '.b'!r}]", 1)
        if w.shape[1] != prev:
            raise ValueError(f"head[{name + '.w'!r}]: expected {prev} input columns, got shape {list(w.shape)}")
        if b.shape[0] != w.shape[0]:
            raise ValueError(f"head[{name + '.b'!r}]: expected shape [{w.shape[0]}], got {list(b.shape)}")
        layers.append((w, b))
        prev = w.shape[0]
        if name == "out":
            break
        k += 1
    if layers[-1][0].shape[0] != 1:
        raise ValueError(f"head['out.w']: expected 1 output row, got shape {list(layers[-1][0].shape)}")
    return layers


_HEAD_CACHE: "collections.OrderedDict[tuple, Layers]" = collections.OrderedDict()
_HEAD_CACHE_SIZE = 8


def _array_key(v: Any) -> tuple | None:
    # torch tensors carry a version counter bumped by every in-place write (an optimizer
    # step), so an updated head is validated again; numpy arrays are keyed by buffer.
    if isinstance(v, torch.Tensor):
        return (id(v), v.data_ptr(), v._version)
    if isinstance(v, np.ndarray) and v.dtype == np.float32 and v.flags.c_contiguous:
        return (id(v), v.__array_interface__["data"][0])
    return None  # converted by copy: a cached copy could go stale, so never cache it


def checked_head(head: Mapping[str, ArrayLike], in_dim: int) -> Layers:
    """``check_head`` memoised per head object: the shape and NaN checks of the weights
    cost ~10x the fused kernel at small batch, and a head is reused for many calls.
    (A numpy head written in place with NaN after its first use is not re-checked.)"""
    if not isinstance(head, Mapping):
        return check_head(head, in_dim)
    parts = tuple((k, _array_key(v)) for k, v in head.items())
    if any(a is None for _, a in parts):
        return check_head(head, in_dim)
    key = (id(head), in_dim, parts)
    layers = _HEAD_CACHE.get(key)
    if layers is None:
        layers = check_head(head, in_dim)
        _HEAD_CACHE[key] = layers
        while len(_HEAD_CACHE) > _HEAD_CACHE_SIZE:
            _HEAD_CACHE.popitem(last=False)
    else:
        _HEAD_CACHE.move_to_end(key)
    return layers
