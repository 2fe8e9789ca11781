"""Planner benchmark (issue 21): recall@10 against ``exact=True`` and latency against the exact scan,
for every weight vector in {0, 0.5, 1, 2}^3 except (0, 0, 0), on clustered and unstructured data.

Size: ``METACOG_BENCH_MEMORY_N`` (default 20,000); stores are built once and cached by
``bench/memory_data.py`` (``METACOG_BENCH_MEMORY_DIR``, default /tmp/metacog_memory_bench).
Queries: ``METACOG_BENCH_PLANNER_Q`` (default 20) per weight vector, one query per call,
``touch=False``. For each weight vector: one warm-up call with another query (it pays for the
planner's one-time probe checks and curves, reported as ``first_call_ms``), then the Q queries,
each timed on the planner and on the exact scan back to back (alternating which goes first), in
the same run.

    pytest bench/bench_memory_planner.py --benchmark-json=bench/results/memory_planner_<n>.json
"""
from __future__ import annotations

import os
import sys
import time
from collections import Counter

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from memory_data import open_store  # noqa: E402

from metacog_fast.memory.synthetic import SyntheticSpec, queries, weight_grid  # noqa: E402

N = int(os.environ.get("METACOG_BENCH_MEMORY_N", "20000"))
Q = int(os.environ.get("METACOG_BENCH_PLANNER_Q", "20"))
K = 10


def _recall(got: np.ndarray, want: np.ndarray) -> float:
    return len(set(got.tolist()) & set(want.tolist())) / max(len(want), 1)


@pytest.mark.parametrize("data", ["clustered", "unstructured"])
def test_planner_every_weighting(benchmark, data):
    spec = SyntheticSpec(data=data)
    t0 = time.perf_counter()
    store, build = open_store(data, N)
    open_s = time.perf_counter() - t0
    qs = queries(spec, Q + 1, seed=11)
    now = spec.now
    rows = []
    try:
        for w in weight_grid():
            t = time.perf_counter()
            store.retrieve(qs[Q], K, now, weights=w, touch=False)  # warm-up: probe checks, curves
            first = time.perf_counter() - t
            fast_t, exact_t, rec, plans = [], [], [], Counter()
            for i, q in enumerate(qs[:Q]):
                # alternate which runs first: the second finds the query's rows in cache
                for exact in ((False, True) if i % 2 == 0 else (True, False)):
                    t = time.perf_counter()
                    out = store.retrieve(q, K, now, weights=w, touch=False, exact=exact)[0][0]
                    (exact_t if exact else fast_t).append(time.perf_counter() - t)
                    if exact:
                        want = out
                    else:
                        got, plan = out, store.last_plan
                plans[plan["path"] + (":" + plan["cap"] if "cap" in plan else "")] += 1
                rec.append(_recall(got, want))
            p50_f, p50_e = float(np.median(fast_t)), float(np.median(exact_t))
            rows.append({"weights": list(w), "recall_at_10": float(np.mean(rec)), "min_query_recall": float(min(rec)),
                         "p50_ms": p50_f * 1e3, "exact_p50_ms": p50_e * 1e3, "ratio_vs_exact": p50_f / p50_e,
                         "first_call_ms": first * 1e3, "paths": dict(plans)})
        P = store._planner
        curves = {str(m): {"ef": c.ef, "points": c.points} for m, c in P.curves.items()}
        cost = {"scan_ns": P.cost.scan_ns, "cand_ns": P.cost.cand_ns, "call_s": P.cost.call_s}
        calib = P.calibration_s
    finally:
        store.close()
    recalls = [r["recall_at_10"] for r in rows]
    ratios = [r["ratio_vs_exact"] for r in rows]
    benchmark.extra_info.update({
        "n": N, "data": data, "queries_per_weighting": Q, "k": K, "build": build, "open_s": open_s,
        "min_recall_at_10": min(recalls), "weightings_below_0.95": [r["weights"] for r in rows if r["recall_at_10"] < 0.95],
        "max_ratio_vs_exact": max(ratios), "median_ratio_vs_exact": float(np.median(ratios)),
        "weightings_slower_than_exact": [r["weights"] for r in rows if r["ratio_vs_exact"] > 1.0],
        "calibration_s": calib, "hnsw_curves": curves, "cost_model": cost, "rows": rows,
    })
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
