"""Memory retrieval score and exact rerank (docs/design.md §1.4), with ``backend=``.

``memory_scores`` gives the score of every candidate; ``memory_rerank`` the top-k
candidates per query; ``memory_rerank_bounded`` the same top-k over one shared candidate list,
bounding scores from int8 codes of the keys first (the planner's scan). Backends (one dispatch table): ``"cpu"`` (:mod:`.cpu`: C++, OpenMP over queries,
per-ISA dot products) and ``"torch"`` (:mod:`.naive`, the readable reference). The memory
store (``metacog_fast.memory``) calls this with HNSW + recency/importance candidates, with
``check=False``: its columns are already float32/float64/int64 C-contiguous and its
candidates in range, so only the compiled core's own boundary checks run.

Shapes: queries [Q, D] float32 (L2-normalised), keys [N, D] float32
(L2-normalised), last_access [N] float64 seconds, importance [N] float32 in
[1, 10], candidates [C] (shared) or [Q, C] int64 rows of ``keys`` (-1 = padding).
Results: scores [Q, C] float32; rerank -> (rows [Q, k] int64, scores [Q, k] float32).
Not differentiable: the store ranks records, it does not train through them.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from metacog_fast.ops._dispatch import DispatchTable
from metacog_fast.ops.memory import naive as ref

TABLE = DispatchTable("memory", {"cpu": "metacog_fast.ops.memory.cpu", "torch": "metacog_fast.ops.memory.naive"})

Weights = tuple[float, float, float]


def _np(x: Any, name: str, dtype: type, ndim: tuple[int, ...]) -> np.ndarray:
    try:
        import torch

        if isinstance(x, torch.Tensor):
            if x.is_cuda:
                raise ValueError(f"{name}: memory kernels run on the CPU; got a CUDA tensor")
            x = x.detach().numpy()
    except ImportError:  # pragma: no cover
        pass
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name}: expected a numeric array, got dtype {a.dtype}")
    if a.ndim not in ndim:
        raise ValueError(f"{name}: expected {' or '.join(f'{n}-d' for n in ndim)} array, got shape {list(a.shape)}")
    return np.ascontiguousarray(a, dtype=dtype)


def _inputs(queries, keys, last_access, importance, candidates):
    q = _np(queries, "queries", np.float32, (2,))
    kk = _np(keys, "keys", np.float32, (2,))
    if kk.shape[1] != q.shape[1]:
        raise ValueError(f"keys: expected shape [N, {q.shape[1]}] (the query dim), got {list(kk.shape)}")
    n = kk.shape[0]
    la = _np(last_access, "last_access", np.float64, (1,))
    imp = _np(importance, "importance", np.float32, (1,))
    if la.shape[0] != n:
        raise ValueError(f"last_access: expected shape [{n}], got {list(la.shape)}")
    if imp.shape[0] != n:
        raise ValueError(f"importance: expected shape [{n}], got {list(imp.shape)}")
    c = _np(candidates, "candidates", np.int64, (1, 2))
    if c.ndim == 2 and c.shape[0] != q.shape[0]:
        raise ValueError(f"candidates: expected shape [C] or [{q.shape[0]}, C], got {list(c.shape)}")
    if c.size and (c.min() < -1 or c.max() >= n):
        raise ValueError(f"candidates: rows must lie in [-1, {n}), got min {c.min()} max {c.max()}")
    if not np.isfinite(q).all():
        raise ValueError("queries: contains NaN or inf")
    return q, kk, la, imp, c


def _weights(weights: Weights) -> Weights:
    if len(weights) != 3:
        raise ValueError(f"weights: expected (w_rec, w_rel, w_imp), got {weights!r}")
    return tuple(float(w) for w in weights)  # type: ignore[return-value]


def memory_scores(
    queries: Any,
    keys: Any,
    last_access: Any,
    importance: Any,
    candidates: Any,
    now: float,
    weights: Weights = (1.0, 1.0, 1.0),
    decay: float = ref.DECAY,
    unit: float = ref.UNIT_SECONDS,
    backend: str = "auto",
    *,
    check: bool = True,
) -> np.ndarray:
    """docs/design.md §1.4 score of each candidate row for each query: [Q, C] float32 (-inf at padding).

    ``check=False``: the fast path for callers whose arrays already have the dtypes above,
    C-contiguous, with candidates in range (the compiled core still checks dtypes and shapes).
    """
    if check:
        arrays = _inputs(queries, keys, last_access, importance, candidates)
        weights = _weights(weights)
    else:
        arrays = (queries, keys, last_access, importance, candidates)
    be = TABLE.resolve(backend)
    if be == "torch":
        return ref.memory_scores(*_torch(arrays), float(now), weights, float(decay), float(unit)).float().numpy()
    return TABLE.impl(be).memory_scores(*arrays, float(now), weights, float(decay), float(unit))


def memory_rerank(
    queries: Any,
    keys: Any,
    last_access: Any,
    importance: Any,
    candidates: Any,
    k: int,
    now: float,
    weights: Weights = (1.0, 1.0, 1.0),
    decay: float = ref.DECAY,
    unit: float = ref.UNIT_SECONDS,
    backend: str = "auto",
    *,
    check: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k candidate rows per query, best first: (rows [Q, k] int64, scores [Q, k] float32).

    Ties go to the smaller row; missing places are row -1 with score -inf. ``check=False``:
    as :func:`memory_scores`.
    """
    if check:
        if int(k) < 1:
            raise ValueError(f"k: expected k >= 1, got {k}")
        arrays = _inputs(queries, keys, last_access, importance, candidates)
        weights = _weights(weights)
    else:
        arrays = (queries, keys, last_access, importance, candidates)
    be = TABLE.resolve(backend)
    if be == "torch":
        rows, scores = ref.memory_rerank(*_torch(arrays), int(k), float(now), weights, float(decay), float(unit))
        return rows.numpy(), scores.float().numpy()
    return TABLE.impl(be).memory_rerank(*arrays, int(k), float(now), weights, float(decay), float(unit))


def _torch(arrays: tuple[np.ndarray, ...]) -> list[Any]:
    """The numpy inputs as torch tensors (shared memory) for the reference."""
    import torch

    return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]



def memory_rerank_bounded(
    queries: Any,
    keys: Any,
    codes: Any,
    scale: Any,
    err: Any,
    last_access: Any,
    importance: Any,
    candidates: Any,
    k: int,
    now: float,
    weights: Weights = (1.0, 1.0, 1.0),
    decay: float = ref.DECAY,
    unit: float = ref.UNIT_SECONDS,
    backend: str = "auto",
    *,
    check: bool = True,
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`memory_rerank` over one shared candidate list [C], reading int8 codes of the keys
    first: (rows [Q, k], scores [Q, k], rows scored exactly). Same rows, scores and order as
    :func:`memory_rerank` (the codes only bound scores; the top-k is scored from ``keys``).

    codes [N, D] int8, scale [N] float32, err [N] float32 with |keys[r] - scale[r] * codes[r]| <= err[r]
    (``metacog_fast.memory.table.quantize``). The ``"torch"`` backend has no bounded form: it runs
    :func:`memory_rerank` and reports every candidate as scored exactly.
    """
    if check:
        if int(k) < 1:
            raise ValueError(f"k: expected k >= 1, got {k}")
        q, kk, la, imp, c = _inputs(queries, keys, last_access, importance, candidates)
        if c.ndim != 1:
            raise ValueError(f"candidates: the bounded scan takes one shared list [C], got shape {list(c.shape)}")
        n, d = kk.shape
        cd = np.asarray(codes)
        if cd.dtype != np.int8 or cd.shape != (n, d):
            raise ValueError(f"codes: expected int8 [{n}, {d}], got {cd.dtype} {list(cd.shape)}")
        sc = _np(scale, "scale", np.float32, (1,))
        er = _np(err, "err", np.float32, (1,))
        if sc.shape != (n,) or er.shape != (n,):
            raise ValueError(f"scale, err: expected shape [{n}], got {list(sc.shape)}, {list(er.shape)}")
        arrays = (q, kk, np.ascontiguousarray(cd), sc, er, la, imp, c)
        weights = _weights(weights)
    else:
        arrays = (queries, keys, codes, scale, err, last_access, importance, candidates)
    be = TABLE.resolve(backend)
    if be == "torch":
        q, kk, _, _, _, la, imp, c = arrays
        rows, scores = memory_rerank(q, kk, la, imp, c, k, now, weights, decay, unit, backend="torch", check=False)
        return rows, scores, int(np.count_nonzero(np.asarray(c) >= 0)) * len(q)
    return TABLE.impl(be).memory_rerank_bounded(*arrays, int(k), float(now), weights, float(decay), float(unit))
