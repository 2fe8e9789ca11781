"""The planner's measurements on the live store (kept in :class:`metacog_fast.memory.planner.Planner`):
the cost model (per-row scan and candidate rates, the fixed cost of a call), the HNSW recall curve
per seed size m, and per weight class the probe check of the approximate paths (recall@k against
the exact scan, ms per probe). Each is measured on first need and again once the store grew or
shrank by ``recheck_growth``; all under ``_mutate``.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from metacog_fast.memory import buckets as bk
from metacog_fast.memory import threshold as thr
from metacog_fast.memory.filters import NO_FILTER
from metacog_fast.memory.planner import ClassCheck, HnswCurve, Timer, drop_self, recall_at

if TYPE_CHECKING:
    from metacog_fast.memory.retrieval import Retriever, Weights


def ensure_costs(r: "Retriever") -> None:
    """Measure the cost model, again after the store grew or shrank by ``recheck_growth``: one query
    over every live row (the scan), over a random sorted quarter of them (at most 32k: scattered
    candidates) and over 16 rows (the fixed cost of a call); the best of a few repetitions each,
    so a busy moment does not set the model."""
    P, t = r.planner, r.table
    cm = P.cost
    if cm.measured and not P._stale(cm.live, t.live):
        return
    rows = r.filters.all_rows(NO_FILTER)
    if len(rows) < 1024:
        return
    rng = np.random.default_rng(0)
    q = t.keys[rows[:1]]
    scat = np.sort(rng.choice(rows, min(len(rows) // 4, 32768), replace=False))
    tiny = rows[:16]

    def best(rr: np.ndarray, reps: int, scan: bool = False) -> float:
        out = np.inf
        for _ in range(reps):
            with Timer() as tm:
                if scan:  # the planner's scan, as it runs
                    r.scan(q, NO_FILTER, 10, 0.0, (1.0, 1.0, 1.0))
                else:
                    r.rerank(q, rr, 10, 0.0, (1.0, 1.0, 1.0))
            out = min(out, tm.s)
        return out

    call = best(tiny, 5)
    cm.call_s = call
    cm.scan_ns = max(best(rows, 2 if len(rows) > 200_000 else 3, scan=True) - call, 0.0) * 1e9 / len(rows)
    cm.cand_ns = max(best(scat, 3) - call, 0.0) * 1e9 / len(scat)
    # Gathering a completion (list suffixes, validity checks, padding) costs per row too.
    everything = np.full((1, bk.N_BUCKETS), -np.inf)
    g = np.inf
    for _ in range(2):
        with Timer() as tm:
            thr.gather(r.lists, bk.ANY_AGENT, everything).padded()
        g = min(g, tm.s)
    cm.cand_ns += g * 1e9 / len(rows)
    cm.measured, cm.live = True, t.live


def probe_rows(r: "Retriever", n: int) -> np.ndarray:
    """``n`` live rows drawn at random (seeded by the store size), ascending: the probe queries."""
    rows = r.filters.all_rows(NO_FILTER)
    rng = np.random.default_rng(len(rows))
    return np.sort(rng.choice(rows, min(n, len(rows)), replace=False))


def curve(r: "Retriever", m: int) -> HnswCurve:
    """The HNSW recall curve for seed size ``m`` (measured now if missing or stale)."""
    P, c, t = r.planner, r.config, r.table
    cur = P.curve(m, t.live)
    if cur is not None:
        return cur
    t0 = time.perf_counter()
    probes = probe_rows(r, 2 * P.probes)
    q = t.keys[probes]
    want_rows, _ = r.rerank(q, r.filters.all_rows(NO_FILTER), m + 1, 0.0, (0.0, 1.0, 0.0))
    want = drop_self(want_rows, None, probes, m)
    cur = HnswCurve(m=m, live=t.live)
    ef = max(m + 1, c.ef)
    idx = r.main.index
    while ef <= max(c.ef_max, m + 1):
        with r.main.lock, Timer() as tm:
            idx.set_ef(ef)
            labels = np.concatenate([idx.knn_query(q[i: i + 1], k=m + 1, num_threads=1)[0]
                                     for i in range(len(q))])
            idx.set_ef(c.ef)
        got = drop_self(t.id_to_row[labels.astype(np.int64)], None, probes, m)
        rec = recall_at(got, want, m)
        ms = tm.s * 1e3 / len(q)
        cur.points.append((ef, rec, ms))
        if rec >= P.hnsw_recall_target:
            cur.ef, cur.ms = ef, ms
            break
        if ms * 1e-3 >= P.cost.scan_s(t.live, 1):  # wider beams would be slower than the scan
            break
        ef *= 2
    P.curves[m] = cur
    P.calibration_s += time.perf_counter() - t0
    return cur


def class_check(r: "Retriever", cls: tuple, k: int, now: float, w: "Weights") -> ClassCheck:
    """Probe results of the approximate paths for weight class ``cls`` (measured now if missing
    or stale): recall@k against the exact scan and ms per probe."""
    P, t = r.planner, r.table
    chk = P.check(cls, t.live, now)
    if chk is not None:
        return chk
    t0 = time.perf_counter()
    probes = probe_rows(r, P.probes)
    q = t.keys[probes]
    none = NO_FILTER
    want = drop_self(r.scan(q, none, k + 1, now, w)[0], None, probes, k)
    chk = ClassCheck(live=t.live, now=now)
    P.checks[cls] = chk  # present while measuring: the threshold runs below do not recurse
    n = t.live
    runs = [("threshold_hnsw", lambda: r.threshold(q, k + 1, now, w, none, n, cls, None, approx=True,
                                                   locked=True))]
    if min(w) > 0 and w[1] <= w[0] + w[2]:
        runs.append(("hot", lambda: r.hot_path(q, k + 1, now, w, none, None, locked=True)))
    for name, fn in runs:
        fn()  # warm: builds the hot set, measures HNSW curves, fills caches
        best = np.inf
        for _ in range(2):
            with Timer() as tm:
                rows, _ = fn()
            best = min(best, tm.s)
        chk.recall[name] = recall_at(drop_self(rows, None, probes, k), want, k)
        chk.ms[name] = best * 1e3 / len(q)
    if P.passes(chk, "threshold_hnsw"):
        chk.ms["threshold"] = chk.ms["threshold_hnsw"]
    else:
        best = np.inf
        for _ in range(2):
            with Timer() as tm:
                r.threshold(q, k + 1, now, w, none, n, cls, None, approx=False, locked=True)
            best = min(best, tm.s)
        chk.ms["threshold"] = best * 1e3 / len(q)
    P.calibration_s += time.perf_counter() - t0
    return chk
