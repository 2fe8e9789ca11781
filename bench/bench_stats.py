"""Bootstrap resampling loops: numba against vectorised numpy, same run, same draws.

    bash bench/memory_locked.sh .venv/bin/python -m pytest bench/bench_stats.py \
        --benchmark-json=bench/results/stats_bootstrap.json

Anchor: the package's vectorised numpy kernels (metacog_fast.metrics.resample, the code the tests
exercise). Candidate: the numba loops of bench/stats_numba.py (parallel over resamples). Each
benchmark times the whole statistic the way a report computes it, with 10,000 resamples:

* paired bootstrap over n units (60 and 500 games): draw [B, n] indices, mean of each resample;
* cluster-bootstrap AUROC2 over E episodes of L chunks/steps (60 x 20, 500 x 20, and Meta-World's
  60 x 500): draw stratified episode counts, then the replicate AUROC2s (numpy: the pair matrix K
  and two products per block of resamples; numba: one pass over the signal-sorted rows per
  resample).

Both sides get the same draws, and their replicates are checked equal before timing.
``extra_info``: numpy and numba seconds (best of the rounds), the kernel-only seconds (draws
excluded), and ``ratio`` = numpy / numba (> 1: numba faster).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

from metacog_fast.metrics.clustered import _episode_kinds, _pair_matrix, replicate_auroc2
from metacog_fast.metrics.resample import mean_replicates, ratio_of_quadratic_forms, stratified_counts, unit_indices

numba = pytest.importorskip("numba")
sys.path.insert(0, os.path.dirname(__file__))
from stats_numba import auc_replicates_numba, mean_replicates_numba  # noqa: E402

RESAMPLES = 10_000
ROUNDS = 15


def _best(fn, repeat: int = ROUNDS) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _threads() -> dict:
    """Threads of both sides and the 1-minute load average (the machine is shared; see the guide)."""
    info = {"numba_threads": int(numba.get_num_threads()), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
            "loadavg_1min": os.getloadavg()[0]}
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = [(d.get("internal_api"), d.get("num_threads")) for d in threadpool_info()]
    except ImportError:
        pass
    return info


@pytest.mark.parametrize("n", [60, 500])
def test_paired_bootstrap(benchmark, n):
    rng = np.random.default_rng(n)
    d = (rng.random(n) < 0.45).astype(np.float64) - (rng.random(n) < 0.35)

    def numpy_full():
        return mean_replicates(d, unit_indices(n, RESAMPLES, 0))

    def numba_full():
        return mean_replicates_numba(d, unit_indices(n, RESAMPLES, 0))

    np.testing.assert_allclose(numba_full(), numpy_full(), rtol=0, atol=1e-12)  # also compiles
    idx = unit_indices(n, RESAMPLES, 0)
    t_np = _best(numpy_full)
    benchmark.pedantic(numba_full, rounds=ROUNDS, warmup_rounds=1)
    t_nb = benchmark.stats.stats.min
    benchmark.extra_info.update({
        "units": n, "resamples": RESAMPLES, "numpy_s": t_np, "numba_s": t_nb, "ratio": t_np / t_nb,
        "numpy_kernel_s": _best(lambda: mean_replicates(d, idx)),
        "numba_kernel_s": _best(lambda: mean_replicates_numba(d, idx)),
        "draw_s": _best(lambda: unit_indices(n, RESAMPLES, 0)), **_threads()})


@pytest.mark.parametrize("episodes,rows_per_episode", [(60, 20), (500, 20), (60, 500)])
def test_clustered_auroc2(benchmark, episodes, rows_per_episode):
    E, L = episodes, rows_per_episode
    rng = np.random.default_rng(E * 1000 + L)
    won = rng.random(E) < 0.4
    won[:5], won[5:10] = True, False
    ep = np.repeat(np.arange(E), L)
    y = won[ep].astype(np.int64)
    s = np.round(0.5 * rng.normal(size=E)[ep] + 0.5 * rng.normal(size=E * L) + 0.7 * y, 2)
    p, n, kind = _episode_kinds(y, ep, E)

    def numpy_full():
        return replicate_auroc2(s, y, ep, stratified_counts(kind, RESAMPLES, 0))

    def numba_full():
        return auc_replicates_numba(s, y, ep, stratified_counts(kind, RESAMPLES, 0))

    assert np.array_equal(numba_full(), numpy_full())  # exact: sums of half-integers
    counts = stratified_counts(kind, RESAMPLES, 0)
    pairs = _pair_matrix(s, y, ep, E)
    t_np = _best(numpy_full)
    benchmark.pedantic(numba_full, rounds=ROUNDS, warmup_rounds=1)
    t_nb = benchmark.stats.stats.min
    benchmark.extra_info.update({
        "episodes": E, "rows_per_episode": L, "rows": E * L, "resamples": RESAMPLES,
        "numpy_s": t_np, "numba_s": t_nb, "ratio": t_np / t_nb,
        "numpy_kernel_s": _best(lambda: replicate_auroc2(s, y, ep, counts)),
        "numpy_pair_matrix_s": _best(lambda: _pair_matrix(s, y, ep, E)),
        "numpy_replicates_only_s": _best(lambda: ratio_of_quadratic_forms(counts, *pairs, p[:, None], n[:, None])),
        "numba_kernel_s": _best(lambda: auc_replicates_numba(s, y, ep, counts)),
        "draw_s": _best(lambda: stratified_counts(kind, RESAMPLES, 0)), **_threads()})
