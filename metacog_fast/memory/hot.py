"""The hot set: the records whose query-independent part of the score is highest,
with their own small HNSW index — the "most recent and most important" candidates
of the default fast retrieval path.

Why it exists. With the docs/design.md §1.4 score (recency and importance unnormalised,
relevance = (cos + 1) / 2) relevance spans little between a query's neighbourhood
and the rest of the store, so a top-10 is mostly the *recent, important* records
among the query's neighbours — records that a plain HNSW top-k' by cosine misses
once the neighbourhood holds more than k' records. Scanning every recent and
important record exactly (``fast_path="bound"``) keeps recall at 1.0 but costs
~34k rows per query at 1M records. Instead the hot set keeps the top
``hot_fraction`` of records by

    static(r, t) = decay ** ((t - last_access) / unit) + importance / 10

(the score without relevance, at the docs/design.md §1.4 weights (1, 1, 1)) in a second, small
hnswlib index; a query takes the ``hot_k`` hot records nearest to it and the
``hot_top`` hot records of highest static score whatever their relevance (a
very recent, important record far from the query can still be in its top-10). A record in a
top-k is then either hot (and, among hot records, close to the query) or so close
to the query that the main HNSW finds it. Recall against the exact score is measured
(tests, ``bench/bench_memory.py``), not guaranteed.

Membership is decided at a reference time ``t_ref`` against a threshold ``theta``
(the ``target``-th largest static score then): a record is hot iff
``static(r, t_ref) >= theta``, a time-invariant test on (last_access, importance),
so records added or touched later are classified without re-ranking the store.
They first go to a short *pending* list (scanned exactly by every query; adding to
an HNSW graph costs ~0.1 ms per record) and are folded into the index in one batch
when it grows past ``hot_pending_max``. The set is rebuilt at the current time when
simulation time has moved on by ``hot_rebuild_after`` seconds, or when its size has
drifted outside [target / 2, 2 * target].
"""
from __future__ import annotations

import math

import hnswlib
import numpy as np

from metacog_fast.memory.config import MemoryConfig
from metacog_fast.memory.index import query_threads
from metacog_fast.memory.table import Table


class HotSet:
    """Hot records of one store (rows of its :class:`Table`; labels are record ids)."""

    def __init__(self, table: Table, config: MemoryConfig, threads: int) -> None:
        self.table = table
        self.config = config
        self.threads = threads
        self.index: hnswlib.Index | None = None
        self.member = np.zeros(0, np.bool_)      # [rows] in the index or pending
        self.in_index = np.zeros(0, np.bool_)    # [rows] in the index
        self.pending: list[int] = []             # rows waiting to enter the index
        self.t_ref = -math.inf
        self.theta = math.inf
        self.target = 0
        self.size = 0
        self.version = 0                         # bumped by every change: keys cached row lists
        self._rows_cache: tuple[int, np.ndarray] | None = None
        self.by_static = np.zeros(0, np.int64)   # hot rows at the last rebuild, highest static first
        self.built = False

    # ------------------------------------------------------------------ scoring
    def static(self, rows: np.ndarray, t: float) -> np.ndarray:
        """static(r, t) [N] float64 for ``rows`` [N] (see module docstring)."""
        c, tb = self.config, self.table
        rec = np.power(c.decay, (t - tb.last_access[rows]) / c.unit)
        return rec + tb.importance[rows].astype(np.float64) / 10.0

    def _grow(self) -> None:
        n = self.table.keys.shape[0]
        if self.member.shape[0] < n:
            for name in ("member", "in_index"):
                old = getattr(self, name)
                new = np.zeros(n, np.bool_)
                new[: old.shape[0]] = old
                setattr(self, name, new)

    # ------------------------------------------------------------------ building
    def needs_rebuild(self, now: float) -> bool:
        if not self.built:
            return True
        c = self.config
        if abs(now - self.t_ref) > c.hot_rebuild_after:
            return True
        target = self._target()
        return self.size > 2 * target or 2 * self.size < target

    def _target(self) -> int:
        c = self.config
        return min(self.table.live, max(c.hot_min, int(math.ceil(c.hot_fraction * self.table.live))))

    def rebuild(self, now: float) -> None:
        """Recompute membership at time ``now``: evict records that fell below the new
        threshold, add those that rose above it (one batched index update)."""
        tb, c = self.table, self.config
        self._grow()
        live = np.flatnonzero(tb.row_id[: tb.end] >= 0)
        self.target = self._target()
        if len(live) == 0 or self.target == 0:
            self.theta = math.inf
            want = np.zeros(0, np.int64)
            self.by_static = want
        else:
            s = self.static(live, now)
            kth = len(live) - self.target
            self.theta = float(np.partition(s, kth)[kth]) if kth > 0 else -math.inf
            keep = s >= self.theta
            want = live[keep]
            self.by_static = want[np.argsort(-s[keep], kind="stable")]
        self.t_ref = now
        wanted = np.zeros(self.member.shape[0], np.bool_)
        wanted[want] = True
        n = tb.end
        evict = np.flatnonzero(self.in_index[:n] & ~wanted[:n])
        enter = np.flatnonzero(wanted[:n] & ~self.in_index[:n])
        if self.index is None:
            self.index = hnswlib.Index(space="cosine", dim=c.dim)
            self.index.init_index(max_elements=max(len(enter) + 1024, 16), M=c.M,
                                  ef_construction=c.hot_ef_construction, allow_replace_deleted=True)
        for r in evict.tolist():
            self.index.mark_deleted(int(tb.row_id[r]))
        self.in_index[evict] = False
        self._index_add(enter)
        self.member[:] = False
        self.member[want] = True
        self.pending = []
        self.size = int(self.member.sum())
        self.built = True
        self.version += 1

    def _index_add(self, rows: np.ndarray) -> None:
        if len(rows) == 0:
            return
        idx, tb = self.index, self.table
        need = idx.element_count + len(rows)
        if need > idx.max_elements:
            idx.resize_index(max(need, int(idx.max_elements * 1.5) + 1024))
        idx.add_items(tb.keys[rows], tb.row_id[rows], num_threads=self.threads, replace_deleted=True)
        self.in_index[rows] = True

    # ------------------------------------------------------------------ updates
    def note(self, rows: np.ndarray) -> None:
        """Rows added, touched or re-rated: hot ones not yet members join the pending list
        (members that fell below the threshold stay until the next rebuild)."""
        if not self.built or len(rows) == 0:
            return
        self._grow()
        rows = rows[~self.member[rows]]
        if len(rows) == 0:
            return
        rows = rows[self.static(rows, self.t_ref) >= self.theta]
        if len(rows) == 0:
            return
        self.member[rows] = True
        self.pending.extend(rows.tolist())
        self.size += len(rows)
        self.version += 1
        if len(self.pending) > self.config.hot_pending_max:
            self._index_add(np.asarray(self.pending, np.int64))
            self.pending = []

    def remove(self, rows: np.ndarray) -> None:
        """Rows about to be freed (forgotten): leave the set."""
        if not self.built or len(rows) == 0:
            return
        rows = rows[self.member[rows]]
        if len(rows) == 0:
            return
        for r in rows[self.in_index[rows]].tolist():
            self.index.mark_deleted(int(self.table.row_id[r]))
        self.in_index[rows] = False
        self.member[rows] = False
        gone = set(rows.tolist())
        self.pending = [r for r in self.pending if r not in gone]
        self.size -= len(rows)
        self.version += 1

    # ------------------------------------------------------------------ queries
    def rows(self) -> np.ndarray:
        """Every hot row [S], ascending (cached until the set changes)."""
        hit = self._rows_cache
        if hit is not None and hit[0] == self.version:
            return hit[1]
        r = np.flatnonzero(self.member[: self.table.end]).astype(np.int64)
        self._rows_cache = (self.version, r)
        return r

    def top_static(self, m: int) -> np.ndarray:
        """The ``m`` hot rows of highest static score at the last rebuild that are still members [<= m]
        (rows that joined since are in :meth:`pending_rows`)."""
        head = self.by_static[: 2 * m]
        head = head[self.member[head]]
        return head[:m]

    def pending_rows(self) -> np.ndarray:
        return np.asarray(self.pending, np.int64)

    def knn_rows(self, q: np.ndarray, k: int, filt=None) -> np.ndarray | None:
        """Rows [Q, k] of the ``k`` indexed hot records nearest to each query, or ``None``
        when hnswlib cannot find ``k`` under the filter (the caller then scans)."""
        k = min(k, self.size - len(self.pending))
        if k <= 0:
            return np.empty((len(q), 0), np.int64)
        self.index.set_ef(max(self.config.hot_k, k))
        try:
            labels, _ = self.index.knn_query(q, k=k, num_threads=query_threads(len(q)), filter=filt)
        except RuntimeError:
            return None
        return self.table.id_to_row[labels]  # labels are ids of records once added: always < len
