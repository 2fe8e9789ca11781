"""Deterministic bootstrap draws and the vectorised replicate kernels behind the intervals.

Every bootstrap in :mod:`metacog_fast.metrics` draws its resamples here, from
``numpy.random.default_rng(seed)``, so a result depends only on its inputs, the number of
resamples and the seed.

* :func:`unit_indices`: [B, n] indices of n units drawn with replacement (paired bootstrap).
* :func:`stratified_counts`: [B, E] how often each cluster (episode) is drawn when clusters are
  resampled with replacement within their stratum (the cluster bootstrap of AUROC2).
* :func:`mean_replicates`: the mean of each resample, d[idx].mean(axis=1).
* :func:`ratio_of_quadratic_forms`: c_b^T K c_b / c_b^T D c_b for each row c_b of the counts: the
  replicate AUROC2 of a cluster bootstrap (metrics/clustered.py explains K and D = P N^T).

numba was measured against these kernels with the same draws (bench/bench_stats.py,
bench/results/stats_bootstrap.json): its paired-bootstrap loop saves 2-7 ms per comparison
(3.6x / 1.7x end to end at 60 / 500 units) and its AUROC2 loop is slower (0.03-0.66x), so the
package has no numba code and does not depend on it.
"""
from __future__ import annotations

import numpy as np

_BLOCK_ELEMENTS = 2_000_000
"""Resamples are processed in blocks of about this many [B, E] elements (memory stays bounded)."""


def check_resamples(resamples: object, minimum: int = 100) -> int:
    if isinstance(resamples, bool) or not isinstance(resamples, (int, np.integer)) or resamples < minimum:
        raise ValueError(f"resamples: expected an int >= {minimum}, got {resamples!r}")
    return int(resamples)


def check_seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    return int(seed)


def unit_indices(n: int, resamples: int, seed: int) -> np.ndarray:
    """[resamples, n] int64 indices in [0, n): each row one bootstrap resample of n units."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(resamples, n))


def mean_replicates(d: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """[B] means d[idx[b]].mean() of d [n] over the resamples idx [B, n]."""
    return d[idx].mean(axis=1)


def stratified_counts(strata: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """[resamples, E] float64 counts: for cluster e, how many times it was drawn in each resample
    when every stratum's clusters are resampled with replacement to the stratum's size.

    strata: [E] int stratum of each cluster (e.g. 0 = successful episode, 1 = failed one). Strata
    are drawn in increasing order, each as one [resamples, E_s] integer draw, so the counts are
    a function of (strata, resamples, seed) only.
    """
    rng = np.random.default_rng(seed)
    E = strata.size
    counts = np.zeros((resamples, E), dtype=np.float64)
    offsets = (np.arange(resamples, dtype=np.int64) * E)[:, None]
    for s in np.unique(strata):
        members = np.flatnonzero(strata == s)
        draw = rng.integers(0, members.size, size=(resamples, members.size))
        counts += np.bincount((offsets + members[draw]).ravel(), minlength=resamples * E).reshape(resamples, E)
    return counts


def ratio_of_quadratic_forms(counts: np.ndarray, K: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                             P: np.ndarray, N: np.ndarray) -> np.ndarray:
    """[B] replicate ratios (c K c) / (c D c) for each row c of counts [B, E], with D = P N^T.

    K [len(rows), len(cols)]: the non-zero block of the [E, E] pair matrix, rows / cols the
    clusters it covers. P, N [E, T] (T = 1 for a plain AUROC2: D = p n^T; one column per task type
    for the within-type AUROC2, D = sum_t p_t n_t^T). NaN where c D c = 0."""
    B, E = counts.shape
    out = np.empty(B, dtype=np.float64)
    step = max(1, _BLOCK_ELEMENTS // max(1, E))
    for b0 in range(0, B, step):
        c = counts[b0:b0 + step]
        num = np.einsum("bj,bj->b", c[:, rows] @ K, c[:, cols])
        den = np.einsum("bt,bt->b", c @ P, c @ N)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[b0:b0 + step] = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    return out
