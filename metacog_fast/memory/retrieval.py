"""Retrieval over the store's columns: the entry of every retrieve (filter codes, the exact path,
the planner's choice or a forced path), the exact scan and the kernel calls (rerank, scores) that
every path ends in. The paths themselves are in their own modules:

* :mod:`.threshold_search`  the threshold search (exact completion, or HNSW-capped);
* :mod:`.hot_path`          HNSW (narrow beam) + hot-set candidates;
* :mod:`.calibration`       the planner's measurements (cost model, HNSW recall curves, probe checks);
* :mod:`.forced_paths`      ``fast_path="hot"`` / ``"bound"`` forced for comparisons.

Shapes: queries q [Q, dim] float32 unit vectors; candidate rows [Q, C] int64 (-1 padded) or [C];
results (rows [Q, k] int64 with -1 where fewer, scores [Q, k] float32), best first.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from metacog_fast.memory import buckets as bk
from metacog_fast.memory import calibration as cal
from metacog_fast.memory import forced_paths
from metacog_fast.memory import hot_path as hp
from metacog_fast.memory import threshold_search as ts
from metacog_fast.memory.config import MemoryConfig
from metacog_fast.memory.filters import NO_FILTER, FilterCache
from metacog_fast.memory.hot import HotSet
from metacog_fast.memory.main_index import MainIndex
from metacog_fast.memory.planner import ClassCheck, HnswCurve, Planner, weight_class
from metacog_fast.memory.table import Table
from metacog_fast.ops.memory import api as memory_ops

Weights = tuple[float, float, float]


class Retriever:
    """The read side of a store. Methods marked "under ``_mutate``" expect the caller to hold
    ``mutate`` (the store's lock over candidate lists, last_access updates and SQLite)."""

    def __init__(self, config: MemoryConfig, table: Table, lists: bk.BucketLists, hot: HotSet, main: MainIndex,
                 filters: FilterCache, mutate: threading.Lock) -> None:
        self.config, self.table, self.lists, self.hot = config, table, lists, hot
        self.main, self.filters = main, filters
        self.mutate = mutate
        self.planner = Planner(config.planner_probes, config.hnsw_recall_target, config.probe_recall_target,
                               config.recheck_growth, config.hot_rebuild_after)
        # Resolved once; the store validates its own columns, so it takes the kernels' unchecked path.
        self.backend = memory_ops.TABLE.resolve(config.backend)
        self.last_candidates = 0
        """Candidate columns reranked by the last approximate retrieval (monitoring, benchmarks)."""
        self.last_plan: dict[str, Any] = {}
        """What the planner did in the last retrieval (path, completion cap, candidates; monitoring)."""

    # ---------------------------------------------------------------- entry
    def rows(self, q: np.ndarray, k: int, now: float, agent: str | None, kind: str | None, since: float | None,
             w: Weights, exact: bool):
        """Top-k rows and scores for checked arguments (call under the store's read lock)."""
        t, c = self.table, self.config
        a_code = None if agent is None else t.agents.find(str(agent))
        k_code = None if kind is None else t.kinds.find(str(kind))
        if (agent is not None and a_code < 0) or (kind is not None and k_code < 0):
            return np.full((len(q), k), -1, np.int64), np.full((len(q), k), -np.inf, np.float32)
        key = (a_code, k_code, None if since is None else float(since))
        if exact:
            with self.mutate:
                self.last_plan = {"path": "exact"}
                return self.scan(q, key, k, now, w, plain=True)
        if c.fast_path == "auto":
            return self.auto(q, k, now, w, key)
        return forced_paths.retrieve(self, q, k, now, w, key)

    def auto(self, q: np.ndarray, k: int, now: float, w: Weights, key: tuple):
        """The planner's choice for this call (metacog_fast/memory/planner.py)."""
        P, c = self.planner, self.config
        nq = len(q)
        cls = weight_class(w)
        mkey = (cls, key, nq > 1)
        with self.mutate:
            n_match, _, filt = self.filters.filter(key, need_rows=False)
            self.ensure_costs()
            # Scan when few records pass, or while this key's last threshold search lost to the scan.
            small = n_match <= max(k, c.exact_below)
            if small or P.scanning(mkey):
                self.last_plan = {"path": "scan", "why": "small" if small else "threshold lost to the scan lately"}
                self.last_candidates = n_match
                return self.scan(q, key, k, now, w)
            unfiltered = key == NO_FILTER
            hot_regime = unfiltered and min(w) > 0 and w[1] <= w[0] + w[2]
            if hot_regime:
                chk = self.class_check(cls, k, now, w)
                use_hot = P.passes(chk, "hot") and chk.ms["hot"] <= chk.ms["threshold"]
            else:
                use_hot = False
        if use_hot:
            self.last_plan = {"path": "hot"}
            return self.hot_path(q, k, now, w, key, filt)
        return self.threshold(q, k, now, w, key, n_match, cls, mkey, approx=None)

    # ---------------------------------------------------------------- exact scan and kernels
    def scan(self, q: np.ndarray, key: tuple, k: int, now: float, w: Weights, plain: bool = False):
        """Exact: every live record under ``key``; under ``_mutate``. The planner's scan reads the int8
        codes first and scores exactly only what can reach the top-k (same result); ``plain=True``
        (``exact=True``, the reference) scores every record from the float keys."""
        rows = self.filters.all_rows(key)
        if plain or len(rows) < 4096 or self.backend != "cpu":
            return self.rerank(q, rows, k, now, w)
        t, c = self.table, self.config
        out = memory_ops.memory_rerank_bounded(q, t.keys, t.codes, t.qscale, t.qerr, t.last_access, t.importance,
                                               rows, k, now, w, c.decay, c.unit, backend=self.backend, check=False)
        return out[0], out[1]

    def rerank(self, q: np.ndarray, cand: np.ndarray, k: int, now: float, w: Weights):
        """Exact top-k of the candidate rows ``cand``."""
        t, c = self.table, self.config
        return memory_ops.memory_rerank(q, t.keys, t.last_access, t.importance, cand, k, now, w, c.decay, c.unit,
                                        backend=self.backend, check=False)

    def scores(self, q: np.ndarray, cand: np.ndarray, now: float, w: Weights) -> np.ndarray:
        """Scores [Q, C] of the candidate rows ``cand``."""
        t, c = self.table, self.config
        return memory_ops.memory_scores(q, t.keys, t.last_access, t.importance, cand, now, w, c.decay, c.unit,
                                        backend=self.backend, check=False)

    def knn(self, q: np.ndarray, k: int, ef: int, filt: Callable[[int], bool] | None):
        """(labels [Q, k] int64, distances [Q, k]) of the main index at beam ``ef``."""
        return self.main.knn(q, k, ef, filt)

    # ---------------------------------------------------------------- the paths
    def threshold(self, q: np.ndarray, k: int, now: float, w: Weights, key: tuple, n_match: int, cls: tuple,
                  mkey: tuple | None, approx: bool | None, locked: bool = False, allow_scan: bool = True):
        """Threshold search (:func:`.threshold_search.search`). ``locked``: caller holds ``_mutate``."""
        if not locked:
            with self.mutate:
                return ts.search(self, q, k, now, w, key, n_match, cls, mkey, approx, allow_scan)
        return ts.search(self, q, k, now, w, key, n_match, cls, mkey, approx, allow_scan)

    def hot_path(self, q: np.ndarray, k: int, now: float, w: Weights, key: tuple,
                 filt: Callable[[int], bool] | None, locked: bool = False):
        """HNSW (narrow beam) + hot-set candidates, exact rerank (:func:`.hot_path.retrieve`)."""
        return hp.retrieve(self, q, k, now, w, key, filt, locked)

    # ---------------------------------------------------------------- the planner's measurements
    def ensure_costs(self) -> None:
        cal.ensure_costs(self)

    def curve(self, m: int) -> HnswCurve:
        return cal.curve(self, m)

    def class_check(self, cls: tuple, k: int, now: float, w: Weights) -> ClassCheck:
        return cal.class_check(self, cls, k, now, w)

    def hnsw_allowed(self, cls: tuple, k: int, now: float, w: Weights) -> bool:
        """Whether the probe check of this weight class allows the HNSW-capped completion."""
        return self.planner.passes(self.class_check(cls, k, now, w), "threshold_hnsw")
