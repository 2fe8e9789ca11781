"""Memory store benchmarks (docs/design.md §1.4, issues 7 and 21).

Size: ``METACOG_BENCH_MEMORY_N`` records (default 20,000) of dim 384, clustered data
(``metacog_fast.memory.synthetic``: 1,000 Gaussian cluster centres, cos to the centre ~0.7,
importance uniform on 1..10, creation times uniform over 30 days, 25 agents, 3 kinds; queries are
noisy centres; ``now`` is the end of the 30 days). The store is built once and cached by
``bench/memory_data.py`` under ``METACOG_BENCH_MEMORY_DIR`` (default /tmp/metacog_memory_bench).

Anchors, measured in the same run: the store's own exact scan (``exact=True``, the compiled kernel
over every record), an exact numpy scan of the full score (``exact_scan_numpy``, the reference the
tests use) and raw ``hnswlib`` ``knn_query`` (k=10, same index, same ef) — the ratios are in
``extra_info``. The store runs its default planner (``fast_path="auto"``).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np
import pytest

from metacog_fast.ops.memory.naive import exact_scan_numpy
from metacog_fast.memory import MemoryStore
from metacog_fast.memory.synthetic import SyntheticSpec, batches, queries

sys.path.insert(0, os.path.dirname(__file__))
from memory_data import open_store  # noqa: E402

N = int(os.environ.get("METACOG_BENCH_MEMORY_N", "20000"))
SPEC = SyntheticSpec(data="clustered")
D = SPEC.dim
NOW = SPEC.now


def _queries(n: int, seed: int = 7) -> np.ndarray:
    return queries(SPEC, n, seed=seed)


@pytest.fixture(scope="module")
def store():
    st, build = open_store("clustered", N)
    st.build_stats = build  # type: ignore[attr-defined]
    yield st
    st.close()


def _times(fn, n: int) -> np.ndarray:
    out = np.empty(n)
    for i in range(n):
        t = time.perf_counter()
        fn(i)
        out[i] = time.perf_counter() - t
    return out


def _exact_anchor(st: MemoryStore, q: np.ndarray, k: int = 10):
    t = st._table
    rows = t.filter_rows(None, None, None)
    return exact_scan_numpy(t.keys, t.last_access, t.importance, rows, q, k, NOW)


def test_single_query_k10(benchmark, store):
    """One query, k=10: p50/p99 over 300 queries; vs exact numpy scan and raw hnswlib knn_query."""
    qs = _queries(300)
    t0 = time.perf_counter()
    store.retrieve(qs[0], 10, NOW, touch=False)  # the first call: cost model, probe checks, hot set
    hot_build_s = time.perf_counter() - t0
    ours = _times(lambda i: store.retrieve(qs[i], 10, NOW, touch=False), len(qs))
    cands, plan = store.last_candidates, dict(store.last_plan)
    idx = store._index
    idx.set_ef(store.config.ef)
    raw = _times(lambda i: idx.knn_query(qs[i: i + 1], k=10, num_threads=1), len(qs))
    n_exact = 5 if N >= 200_000 else 30
    exact = _times(lambda i: _exact_anchor(store, qs[i: i + 1]), n_exact)
    scan = _times(lambda i: store.retrieve(qs[i], 10, NOW, touch=False, exact=True), 10 if N >= 200_000 else 30)
    benchmark.extra_info.update({
        "n": N, "p50_ms": float(np.median(ours) * 1e3), "p99_ms": float(np.percentile(ours, 99) * 1e3),
        "plan": plan, "store_exact_scan_p50_ms": float(np.median(scan) * 1e3),
        "ratio_vs_store_exact_scan": float(np.median(ours) / np.median(scan)),
        "raw_hnswlib_p50_ms": float(np.median(raw) * 1e3), "exact_numpy_p50_ms": float(np.median(exact) * 1e3),
        "ratio_vs_raw_hnswlib": float(np.median(ours) / np.median(raw)),
        "speedup_vs_exact_numpy": float(np.median(exact) / np.median(ours)),
        "fast_path": store.config.fast_path, "candidates_per_query": cands, "hot_set_size": store._hot.size,
        "first_call_s": hot_build_s, "planner_calibration_s": store._planner.calibration_s,
        "build": store.build_stats,
    })
    it = iter(range(10**9))
    benchmark(lambda: store.retrieve(qs[next(it) % len(qs)], 10, NOW, touch=False))


def test_single_query_agent_filter(benchmark, store):
    """One query of one agent (agent filter, 1/25 of the records), k=10; vs raw hnswlib with the same
    filter function and vs the exact numpy scan of that agent's records."""
    qs = _queries(300, seed=5)
    agent = "agent7"
    ours = _times(lambda i: store.retrieve(qs[i], 10, NOW, agent=agent, touch=False), len(qs))
    code = store._table.agents.find(agent)
    _, rows, filt = store._filter((code, None, None), need_rows=True)
    idx = store._index
    idx.set_ef(store.config.ef)
    raw = _times(lambda i: idx.knn_query(qs[i: i + 1], k=10, num_threads=1, filter=filt), len(qs))
    t = store._table
    exact = _times(lambda i: exact_scan_numpy(t.keys, t.last_access, t.importance, rows, qs[i: i + 1], 10, NOW), 20)
    benchmark.extra_info.update({
        "n": N, "n_agent": int(len(rows)), "p50_ms": float(np.median(ours) * 1e3),
        "p99_ms": float(np.percentile(ours, 99) * 1e3), "raw_hnswlib_filtered_p50_ms": float(np.median(raw) * 1e3),
        "exact_numpy_agent_p50_ms": float(np.median(exact) * 1e3),
        "ratio_vs_raw_hnswlib": float(np.median(ours) / np.median(raw)),
        "speedup_vs_exact_numpy": float(np.median(exact) / np.median(ours)),
    })
    it = iter(range(10**9))
    benchmark(lambda: store.retrieve(qs[next(it) % len(qs)], 10, NOW, agent=agent, touch=False))


def test_candidates_per_query(benchmark, store):
    """Records sent to the exact rerank per query by each path: the planner ("auto", the default),
    the forced "hot" path (bounded: HNSW k' + hot_k) and the forced "bound" path (every record that
    could still reach the top-k; recall 1.0 up to HNSW's own). Also their latency and recall, in the
    same run."""
    from dataclasses import replace

    qs = _queries(50, seed=9)
    exact = store.retrieve(qs, 10, NOW, touch=False, exact=True)
    out = {}
    default = store.config
    try:
        for path in ("auto", "hot", "bound"):
            store.config = replace(default, fast_path=path)
            cands, got = [], []
            times = _times(lambda i: (got.append(store.retrieve(qs[i], 10, NOW, touch=False)[0]),
                                      cands.append(store.last_candidates)), len(qs))
            out[path] = {"candidates_mean": float(np.mean(cands)), "fraction_of_store": float(np.mean(cands) / N),
                         "p50_ms": float(np.median(times) * 1e3),
                         "recall_at_10": float(np.mean([len(set(a[0].tolist()) & set(b[0].tolist())) / 10
                                                        for a, b in zip(got, exact)]))}
    finally:
        store.config = default
    benchmark.extra_info.update({"n": N, **{f"{p}_{k}": v for p, d in out.items() for k, v in d.items()},
                                 "hot_speedup_vs_bound": out["bound"]["p50_ms"] / out["hot"]["p50_ms"],
                                 "auto_speedup_vs_bound": out["bound"]["p50_ms"] / out["auto"]["p50_ms"]})
    benchmark.pedantic(lambda: store.retrieve(qs[0], 10, NOW, touch=False), rounds=3, iterations=1)


def test_25_agents_one_call(benchmark, store):
    """25 queries (one per agent) in one call, k=10; vs 25 single calls, raw hnswlib and exact numpy.
    Every repetition uses a different batch of 25 queries (ours and the anchors alike): repeating one
    batch would keep its HNSW nodes in cache and flatter whichever path touches the least other memory."""
    batches = [_queries(25, seed=1000 + i) for i in range(40)]
    ours = _times(lambda i: store.retrieve(batches[i], 10, NOW, touch=False), 40)
    singles = _times(lambda i: [store.retrieve(q, 10, NOW, touch=False) for q in batches[i]], 10)
    idx = store._index
    idx.set_ef(store.config.ef)
    raw = _times(lambda i: idx.knn_query(batches[i], k=10, num_threads=-1), 40)  # same threads as ours
    raw_1t = _times(lambda i: idx.knn_query(batches[i], k=10, num_threads=1), 40)
    exact = _times(lambda i: _exact_anchor(store, batches[i]), 2 if N >= 200_000 else 5)
    benchmark.extra_info.update({
        "n": N, "p50_ms": float(np.median(ours) * 1e3), "p99_ms": float(np.percentile(ours, 99) * 1e3),
        "raw_hnswlib_p50_ms": float(np.median(raw) * 1e3), "exact_numpy_p50_ms": float(np.median(exact) * 1e3),
        "raw_hnswlib_1_thread_p50_ms": float(np.median(raw_1t) * 1e3),
        "ratio_vs_raw_hnswlib": float(np.median(ours) / np.median(raw)),
        "speedup_vs_exact_numpy": float(np.median(exact) / np.median(ours)),
        "speedup_vs_25_single_calls": float(np.median(singles) / np.median(ours)),
    })
    it = iter(range(10**9))
    benchmark(lambda: store.retrieve(batches[next(it) % len(batches)], 10, NOW, touch=False))


def test_recall_at_10(benchmark, store):
    """recall@10 of the default fast path against exact=True (100 queries, unfiltered and per agent)."""
    qs = _queries(100, seed=3)
    fast = store.retrieve(qs, 10, NOW, touch=False)
    exact = store.retrieve(qs, 10, NOW, touch=False, exact=True)
    rec = float(np.mean([len(set(a[0].tolist()) & set(b[0].tolist())) / 10 for a, b in zip(fast, exact)]))
    fast_a = store.retrieve(qs[:25], 10, NOW, agent="agent3", touch=False)
    exact_a = store.retrieve(qs[:25], 10, NOW, agent="agent3", touch=False, exact=True)
    rec_a = float(np.mean([len(set(a[0].tolist()) & set(b[0].tolist())) / 10 for a, b in zip(fast_a, exact_a)]))
    w = (0.0, 1.0, 0.0)  # relevance only: the hot set cannot help
    fast_r = store.retrieve(qs, 10, NOW, weights=w, touch=False)
    exact_r = store.retrieve(qs, 10, NOW, weights=w, touch=False, exact=True)
    rec_r = float(np.mean([len(set(a[0].tolist()) & set(b[0].tolist())) / 10 for a, b in zip(fast_r, exact_r)]))
    benchmark.extra_info.update({"n": N, "recall_at_10": rec, "recall_at_10_agent_filter": rec_a,
                                 "recall_at_10_relevance_only": rec_r})
    benchmark.pedantic(lambda: store.retrieve(qs[:25], 10, NOW, touch=False, exact=True), rounds=1, iterations=1)


def test_insert_batch_1000(benchmark, store):
    """Insert throughput: batches of 1,000 records (SQLite commit + HNSW add) into the N-record store."""
    fresh = SyntheticSpec(data="clustered", seed=99)
    bs = list(batches(fresh, 3000))
    it = iter([(b.embeddings[i: i + 1000], b.importance[i: i + 1000], b.created[i: i + 1000],
                b.agent[i: i + 1000], b.kind[i: i + 1000]) for b in bs for i in range(0, len(b.importance), 1000)])
    ids = []
    benchmark.pedantic(lambda: ids.append(store.add(*next(it))), rounds=3, iterations=1)
    per_s = 1000 / benchmark.stats.stats.median
    benchmark.extra_info.update({"n": N, "records_per_s": per_s, "build": store.build_stats})
    store.forget(np.concatenate(ids))


def test_reopen(benchmark, store, tmp_path):
    """close() + open(): records loaded from SQLite, index loaded after its checks (size, sha256,
    structure). Timed on a backup of the N-record store: a store has one writer at a time, and the
    fixture's store stays open."""
    store.flush()
    path = str(tmp_path / "copy.db")
    store.backup(path)
    MemoryStore.open(path, dim=D).close()  # builds and saves the copy's index once, untimed
    reports = []

    def reopen():
        s = MemoryStore.open(path, dim=D)
        reports.append(s.open_report)
        s.close()

    benchmark.pedantic(reopen, rounds=2 if N >= 200_000 else 3, iterations=1)
    benchmark.extra_info.update({"n": N, "open_report": reports[-1]})
