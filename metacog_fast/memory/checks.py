"""Input checks of the memory store: every public argument is validated here, with an error that
names it, and turned into the arrays the store keeps (embeddings [N, dim] float32, ids [N] int64).
"""
from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

def matrix(x: Any, dim: int, name: str) -> np.ndarray:
    """x (numpy-like or a torch tensor) [N, dim] or [dim] -> a numeric array [N, dim]."""
    torch = sys.modules.get("torch")  # a tensor can only come from an imported torch
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name}: expected a float array [N, {dim}], got dtype {a.dtype}")
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"{name}: expected shape [N, {dim}], got {list(np.shape(x))}")
    return a


def unit_queries(x: Any, dim: int, name: str) -> np.ndarray:
    """Queries [Q, dim] (or [dim]) -> L2-normalised float32 [Q, dim]; one pass checks NaN/inf/zero
    (the float64 squared norm is NaN or inf iff an element is, 0 iff the vector is)."""
    a = matrix(x, dim, name)
    sq = np.einsum("ij,ij->i", a, a, dtype=np.float64)
    if not (np.isfinite(sq).all() and sq.all()):
        a = embeddings(a, dim, name)  # raises the precise error, else the squares overflowed
        return normalise(a / np.abs(a).max(axis=1, keepdims=True))
    return (a / np.sqrt(sq)[:, None]).astype(np.float32)


def embeddings(x: Any, dim: int, name: str) -> np.ndarray:
    a = np.ascontiguousarray(matrix(x, dim, name), np.float32)
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: contains NaN or inf")
    if (np.abs(a).max(axis=1) == 0).any():
        raise ValueError(f"{name}: a zero vector has no direction (cosine undefined)")
    return a


def normalise(a: np.ndarray) -> np.ndarray:
    norm = np.sqrt(np.einsum("ij,ij->i", a, a, dtype=np.float64))
    return (a / norm[:, None]).astype(np.float32)


def broadcast_num(x: Any, n: int, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64) if not isinstance(x, str) else None
    if a is None:
        raise TypeError(f"{name}: expected a number or {n} numbers, got a string")
    if a.ndim == 0:
        return np.full(n, float(a))
    if a.shape != (n,):
        raise ValueError(f"{name}: expected a scalar or shape [{n}], got {list(a.shape)}")
    return a


def importance(a: np.ndarray, name: str) -> np.ndarray:
    if not np.isfinite(a).all() or (a < 1).any() or (a > 10).any():
        bad = a[~(np.isfinite(a) & (a >= 1) & (a <= 10))][:5].tolist()
        raise ValueError(f"{name}: importance must lie in [1, 10], got {bad}")
    return a.astype(np.float32)


def broadcast_str(x: Any, n: int, name: str, required: bool = False) -> list:
    if x is None:
        if required:
            raise ValueError(f"{name}: required (a string or {n} strings)")
        return [None] * n
    if isinstance(x, str):
        if required and not x:
            raise ValueError(f"{name}: expected a non-empty string")
        return [x] * n
    vals = list(x)
    if len(vals) != n:
        raise ValueError(f"{name}: expected a string or {n} strings, got {len(vals)}")
    for v in vals:
        if not (isinstance(v, str) or (v is None and not required)) or (required and not v):
            raise ValueError(f"{name}: expected strings, got {v!r}")
    return vals


def broadcast_obj(x: Any, n: int, name: str) -> list:
    if x is None or isinstance(x, dict):
        return [x] * n
    vals = list(x)
    if len(vals) != n:
        raise ValueError(f"{name}: expected a dict or {n} dicts, got {len(vals)}")
    return vals


def ids(x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 0:
        a = a[None]
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise ValueError(f"ids: expected a 1-d array of integer ids, got {a.dtype} {list(a.shape)}")
    return a.astype(np.int64)


def backup_target(path: Any, own: str) -> str:
    """The backup file path for ``path``: not empty, not the store's own file ``own``, in an
    existing folder."""
    target = os.fspath(path)
    if not target:
        raise ValueError("path: expected a file path for the backup")
    if os.path.abspath(target) == os.path.abspath(own):
        raise ValueError(f"path: {target} is the store's own file; give another path")
    parent = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"path: folder {parent} does not exist")
    return target
