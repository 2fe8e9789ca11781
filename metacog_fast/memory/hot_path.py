"""The hot path (docs/memory.md, "hot"): the main index's nearest few at a narrow beam plus the hot
set's candidates (its nearest by cosine, its highest static scores, its pending members), reranked
exactly. The hot set itself is :class:`metacog_fast.memory.hot.HotSet`.

Shapes: q [Q, dim]; labels [Q, kp] record ids; candidates [Q, C] rows (-1 padded).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from metacog_fast.memory.filters import NO_FILTER

if TYPE_CHECKING:
    from metacog_fast.memory.retrieval import Retriever, Weights


def retrieve(r: "Retriever", q: np.ndarray, k: int, now: float, w: "Weights", key: tuple,
             filt: Callable[[int], bool] | None, locked: bool = False):
    """Top-k of HNSW ``max(k, hot_main_k)`` at beam ``hot_main_ef`` + the hot candidates under
    ``key``. ``locked``: the caller holds ``_mutate`` (the HNSW query runs outside it otherwise)."""
    c = r.config
    kp = max(k, c.hot_main_k)
    labels, _ = r.knn(q, kp, max(c.hot_main_ef, kp), filt)
    if locked:
        return rerank(r, q, labels, k, now, w, key, filt)
    with r.mutate:
        return rerank(r, q, labels, k, now, w, key, filt)


def rerank(r: "Retriever", q: np.ndarray, labels: np.ndarray, k: int, now: float, w: "Weights", key: tuple,
           filt: Callable[[int], bool] | None):
    """Exact top-k of the main-index ``labels`` [Q, kp] + the hot candidates; under ``_mutate``."""
    hrows = r.table.id_to_row[labels]
    cand = np.concatenate([hrows, candidates(r, q, key, filt, now)], axis=1)
    r.last_candidates = cand.shape[1]
    return r.rerank(q, cand, k, now, w)


def candidates(r: "Retriever", q: np.ndarray, key: tuple, filt: Callable[[int], bool] | None,
               now: float) -> np.ndarray:
    """Hot-set candidates [Q, C] (-1 padded) under the filter ``key``; under ``_mutate``."""
    hot, c = r.hot, r.config
    if hot.needs_rebuild(now):
        hot.rebuild(now)
    if key == NO_FILTER:
        n_hot, rows = hot.size, None
    else:
        rows = _filtered(r, key)
        n_hot = len(rows)
    if n_hot <= c.hot_scan_max:
        if rows is None:
            rows = hot.rows()
        return np.broadcast_to(rows, (len(q), len(rows)))
    near = hot.knn_rows(q, c.hot_k, filt)
    if near is None:  # hnswlib could not fill k under the filter: take them all
        rows = hot.rows() if rows is None else rows
        return np.broadcast_to(rows, (len(q), len(rows)))
    shared = _shared(r, key)
    return np.concatenate([near, np.broadcast_to(shared, (len(q), len(shared)))], axis=1)


def _shared(r: "Retriever", key: tuple) -> np.ndarray:
    """Query-independent hot candidates under the filter: the ``hot_top`` of highest static
    score and the pending (not yet indexed) members [C] (cached per hot-set version)."""
    hot, c, f = r.hot, r.config, r.filters

    def compute() -> np.ndarray:
        pend = hot.pending_rows()
        if key == NO_FILTER:
            top = hot.top_static(c.hot_top)
        else:
            top = hot.by_static
            top = top[hot.member[top]]
            top = top[f.passes_key(top, key)][: c.hot_top]
            pend = pend[f.passes_key(pend, key)]
        return np.concatenate([top, pend])

    return f.memo(("shared", c.hot_top) + key, hot.version, compute)


def _filtered(r: "Retriever", key: tuple) -> np.ndarray:
    """Hot rows [S'] passing the filter ``key`` (cached per hot-set version and filter)."""
    hot, f = r.hot, r.filters

    def compute() -> np.ndarray:
        rows = hot.rows()
        return rows[f.passes_key(rows, key)]

    return f.memo(("hot",) + key, hot.version, compute)
