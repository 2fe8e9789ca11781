"""The planner's threshold search: seed a score threshold tau from HNSW neighbours and the most
recent records of each importance bucket, then rerank every record that could still beat tau (a
suffix of each bucket's recency list; :mod:`metacog_fast.memory.threshold`), optionally capped by
the relevance of the HNSW top-m where the measured recall curve trusts it. Falls back to the exact
scan where the cost model predicts the scan cheaper.

Shapes: q [Q, dim]; seeds and candidates [Q, C] rows (-1 padded); tau [Q].
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from metacog_fast.memory import buckets as bk
from metacog_fast.memory import threshold as thr
from metacog_fast.memory.filters import NO_FILTER

if TYPE_CHECKING:
    from metacog_fast.memory.retrieval import Retriever, Weights


def search(r: "Retriever", q: np.ndarray, k: int, now: float, w: "Weights", key: tuple, n_match: int,
           cls: tuple, mkey: tuple | None, approx: bool | None, allow_scan: bool = True):
    """Top-k under ``key`` (``n_match`` records pass it); under ``_mutate``. ``approx``: None = HNSW
    cap where the class's probe check allows it, True = allowed (probe checks), False = exact
    completion only. ``allow_scan=False``: never the scan (tests of the search itself). ``mkey``:
    the planner's key whose won/lost record this call updates (None: none)."""
    P, c, t = r.planner, r.config, r.table
    cm = P.cost
    nq = len(q)
    owner = bk.ANY_AGENT if key[0] is None else key[0]
    t0, cal0 = time.perf_counter(), P.calibration_s
    head = r.lists.head(owner, max(c.head, k))  # k per level: tau is at least the k-th best head
    head = head[r.filters.passes(head, key[1], key[2])]
    # An agent or kind filter leaves rows scattered over the table: their scan runs at the
    # scattered-row rate (measured 6-7x the contiguous one at 1M), not the whole-store rate.
    scattered = key[0] is not None or key[1] is not None
    scan_s = cm.cand_s(n_match, nq) if scattered else cm.scan_s(n_match, nq)
    ones = np.ones(nq)
    # HNSW seeds only without a filter (hnswlib's filter calls Python per visited node) and
    # where relevance counts; the cap from them only where the curve says HNSW finds the top-m.
    rungs = [c.seed_m, c.seed_m_wide] if (w[1] > 0 and key == NO_FILTER and approx is not False) else [0]
    best = None
    for m in rungs:
        hrows, rel_cap = np.empty((nq, 0), np.int64), None
        if m:
            curve = r.curve(m)
            # The cap needs a beam at which the curve reached its target, and one cheaper than the
            # scan; otherwise the default beam still gives good seeds (a higher tau), no cap.
            trusted = curve.ef is not None and curve.ms * 1e-3 * nq < scan_s
            if not trusted and m != rungs[0]:
                break
            labels, dist = r.knn(q, m, curve.ef if trusted else max(c.ef, m), None)
            hrows = t.id_to_row[labels]
            if trusted:
                rel_cap = (2.0 - dist[:, -1].astype(np.float64)) / 2.0  # (cos + 1) / 2, cos = 1 - dist
        seed = np.concatenate([hrows, np.broadcast_to(head, (nq, len(head)))], axis=1)
        top_rows, top_s = r.rerank(q, seed, k, now, w)
        tau = thr.thresholds(top_s, k)
        lm_x, n_x = thr.completion(r.lists, owner, tau, ones, now, w, c.decay, c.unit)
        opts = [("exact", lm_x, n_x, cm.cand_s(n_x, nq))]
        if rel_cap is not None:
            lm_a, n_a = thr.completion(r.lists, owner, tau, rel_cap, now, w, c.decay, c.unit)
            opts.append(("hnsw", lm_a, n_a, cm.cand_s(n_a, nq)))
        exact_opt = opts[0]
        pick = min(opts, key=lambda o: o[3])
        # Prefer the completion that is exact by construction unless it costs clearly more.
        spent = time.perf_counter() - t0 - (P.calibration_s - cal0)  # this call's search so far
        if pick[0] == "hnsw" and exact_opt[3] <= 2 * pick[3] + spent:
            pick = exact_opt
        if pick[0] == "hnsw" and approx is None and not r.hnsw_allowed(cls, k, now, w):
            pick = exact_opt
        best = (pick, top_rows, m)
        nxt = P.curves.get(c.seed_m_wide)
        wide_s = (nxt.ms * 1e-3 * nq) if (nxt is not None and nxt.ef is not None) else scan_s / 8
        if m == rungs[-1] or pick[3] <= wide_s:
            break
    if best is None:  # HNSW untrusted at the first rung: exact completion from the heads alone
        top_rows, top_s = r.rerank(q, head, k, now, w)
        tau = thr.thresholds(top_s, k)
        lm_x, n_x = thr.completion(r.lists, owner, tau, ones, now, w, c.decay, c.unit)
        best = (("exact", lm_x, n_x, cm.cand_s(n_x, nq)), top_rows, 0)
    (kind, lm, n_est, cost_s), top_rows, m = best
    # Factor 2: the model's per-row costs are measured on other row sets than this completion's.
    if allow_scan and 2 * cost_s >= scan_s:
        r.last_plan = {"path": "scan", "why": f"completion {n_est} rows predicted slower"}
        r.last_candidates = n_match
        if mkey is not None and P.calibration_s == cal0:
            P.lost(mkey)
        return r.scan(q, key, k, now, w)
    comp = thr.gather(r.lists, owner, lm)
    if key[1] is not None or key[2] is not None:
        keep = r.filters.passes(comp.rows, key[1], key[2])
        comp = thr.Completion(comp.rows[keep], comp.mask[:, keep])
    cand = np.concatenate([top_rows, comp.padded()], axis=1)
    out = r.rerank(q, cand, k, now, w)
    if mkey is not None and P.calibration_s == cal0:  # calls that measured curves or checks do not count
        if time.perf_counter() - t0 > scan_s:
            P.lost(mkey)
        else:
            P.won(mkey)
    r.last_candidates = cand.shape[1]
    r.last_plan = {"path": "threshold", "cap": "1" if kind == "exact" else f"hnsw m={m}",
                   "candidates": int(cand.shape[1])}
    return out
