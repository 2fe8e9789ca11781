"""The numba candidate for the bootstrap replicate loops, measured against the vectorised numpy
kernels of metacog_fast.metrics.resample by bench/bench_stats.py (decision in docs/statistics.md).

Both take the same draws (``unit_indices`` / ``stratified_counts``), so their replicates are equal
(bit for bit for AUROC2: every sum is of half-integers, exact in float64). numba is imported only
here; the package does not depend on it.
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(parallel=True, cache=False)
def mean_replicates_numba(d: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """[B] mean of d [n] over each resample idx [B, n] (one loop per resample, in parallel)."""
    B, n = idx.shape
    out = np.empty(B, dtype=np.float64)
    for b in numba.prange(B):
        acc = 0.0
        for k in range(n):
            acc += d[idx[b, k]]
        out[b] = acc / n
    return out


@numba.njit(parallel=True, cache=False)
def _auc_rows(counts: np.ndarray, ep_sorted: np.ndarray, pos_sorted: np.ndarray,
              group_start: np.ndarray) -> np.ndarray:
    B = counts.shape[0]
    G = group_start.size - 1
    out = np.empty(B, dtype=np.float64)
    for b in numba.prange(B):
        neg_below = 0.0
        u = 0.0
        wp_all = 0.0
        for g in range(G):
            wp = 0.0
            wn = 0.0
            for r in range(group_start[g], group_start[g + 1]):
                w = counts[b, ep_sorted[r]]
                if pos_sorted[r]:
                    wp += w
                else:
                    wn += w
            u += wp * (neg_below + 0.5 * wn)
            neg_below += wn
            wp_all += wp
        den = wp_all * neg_below
        out[b] = u / den if den > 0 else np.nan
    return out


def auc_replicates_numba(s: np.ndarray, y: np.ndarray, ep: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """[B] replicate AUROC2 of signal s [R], outcome y [R], episode codes ep [R] under the episode
    counts [B, E]: one pass over the rows sorted by signal per resample (ties grouped)."""
    order = np.argsort(s, kind="mergesort")
    ss = s[order]
    starts = np.r_[0, np.flatnonzero(np.diff(ss)) + 1, ss.size].astype(np.int64)
    return _auc_rows(counts, ep[order].astype(np.int64), (y[order] == 1), starts)
