"""The retrieval paths that ``MemoryConfig.fast_path`` forces instead of the planner ("auto"): the
defaults before the planner (issue 21), kept selectable so that the planner is compared against
them (bench/bench_memory.py ``test_candidates_per_query``, tests/test_memory_hot.py).

* ``"hot"``:   HNSW top-k' + the hot set's candidates (a bounded count; recall measured);
* ``"bound"``: HNSW top-k' + every record of a recency/importance bucket that could still reach
  the top-k given the k'-th relevance (recall 1.0 up to HNSW's own).

Both scan exactly when few records pass the filter. Shapes: q [Q, dim]; candidates [Q, C] rows.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from metacog_fast.memory import buckets as bk
from metacog_fast.memory import hot_path as hp
from metacog_fast.memory import threshold as thr
from metacog_fast.memory.filters import NO_FILTER

if TYPE_CHECKING:
    from metacog_fast.memory.retrieval import Retriever, Weights


def retrieve(r: "Retriever", q: np.ndarray, k: int, now: float, w: "Weights", key: tuple):
    """Top-k under ``key`` on the path ``r.config.fast_path`` names ("hot" or "bound")."""
    t, c = r.table, r.config
    a_code, k_code, since = key
    if c.fast_path == "hot" and w[1] <= w[0] + w[2]:
        # The hot set brings the recent/important records, and relevance does not dominate the
        # score: the main search only needs the most relevant few, with a narrower beam. When it
        # does dominate (e.g. weights (0, 1, 0)) the full beam is needed (recall 0.73 at ef 32
        # against 0.94 at ef 96 on the 1M benchmark store).
        kp = max(k, c.hot_main_k)
        ef = max(c.hot_main_ef, kp)
    else:
        kp = max(k * c.candidate_factor, c.min_candidates)
        ef = max(c.ef, kp)
    with r.mutate:
        n_match, _, filt = r.filters.filter(key, need_rows=False)
        limit = c.exact_below if key == NO_FILTER else max(c.exact_below, c.exact_filtered_below)
        if n_match <= max(limit, kp):
            return r.scan(q, key, k, now, w)
    # 1) HNSW candidates on relevance, under the filter.
    try:
        labels, dist = r.knn(q, kp, ef, filt)
    except RuntimeError:  # hnswlib found fewer than kp under a selective filter
        with r.mutate:
            return r.scan(q, key, k, now, w)
    with r.mutate:
        hrows = t.id_to_row[labels]  # [Q, kp]; -1 if forgotten meanwhile (HNSW labels are ids < len)
        if c.fast_path == "hot":
            cand = np.concatenate([hrows, hp.candidates(r, q, key, filt, now)], axis=1)
            r.last_candidates = cand.shape[1]
            return r.rerank(q, cand, k, now, w)
        rel_bound = (1.0 - dist[:, -1].astype(np.float64) + 1.0) / 2.0  # relevance of the kp-th
        # 2) seed the threshold with HNSW + the most recent records of each importance bucket.
        owner = bk.ANY_AGENT if a_code is None else a_code
        head = r.lists.head(owner, c.head)
        head = head[r.filters.passes(head, k_code, since)]
        seed = np.concatenate([hrows, np.tile(head, (len(q), 1))], axis=1)
        s = r.scores(q, seed, now, w)
        kk = min(k, s.shape[1])
        tau = -np.partition(-s, kk - 1, axis=1)[:, kk - 1].astype(np.float64)
        # 3) every record of a bucket that could still beat tau (a recency-list suffix).
        la_min = bk.la_min(tau, rel_bound, r.lists.hi, now, w, c.decay, c.unit)
        urows, umask = r.lists.suffixes(owner, la_min)
        keep = r.filters.passes(urows, k_code, since)
        urows, umask = urows[keep], umask[:, keep]
        cand = np.concatenate([hrows, thr.ragged_pad(urows, umask)], axis=1)
        r.last_candidates = cand.shape[1]
        return r.rerank(q, cand, k, now, w)
