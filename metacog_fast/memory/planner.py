"""Query planner of the memory store: per call, the cheapest retrieval path that keeps
recall@k against ``exact=True`` (docs/memory.md, "Planner").

Paths: ``"scan"`` (the compiled exact scan of every record under the filter), ``"threshold"``
(:mod:`metacog_fast.memory.threshold`: exact by construction with ``rel_cap = 1``, or bounded by
HNSW's measured recall with the HNSW cap) and ``"hot"`` (:mod:`metacog_fast.memory.hot`: a bounded
candidate set whose recall is a property of the data). The planner decides from

* a **cost model** (:class:`CostModel`): nanoseconds per (row x query) of the compiled scan over
  every row and of the rerank over scattered candidate rows, and the fixed cost of a call, measured
  on this store (best of a few repetitions, again after it grew or shrank), and a verdict per weight
  class when a threshold search lost to the scan (scan the next calls, retry with backoff);
* an **HNSW recall curve** (:class:`HnswCurve`, per seed size ``m``): recall@m of the main index
  against the exact cosine top-m on probe queries at widening beams; the HNSW cap is used only at a
  beam where that recall reached ``hnsw_recall_target``;
* **probe checks per weight class** (:class:`ClassCheck`): the approximate paths (hot, HNSW-capped
  threshold) run against the exact scan on probe queries, once per weight class (weights up to a
  common factor rank identically); a path is used only if its probe recall reached
  ``probe_recall_target``, and hot only if it was also faster than the threshold path there.

Probe queries are stored records' own embeddings with the record itself left out of both result
lists (so the probe is a query that lands in a real neighbourhood, as an agent's queries do).
Checks are redone after the store grew or shrank by ``recheck_growth`` or simulation time moved by
``hot_rebuild_after``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

Weights = tuple[float, float, float]
FilterKey = tuple


def weight_class(w: Weights) -> Weights:
    """Weights scaled to sum 1 (rounded): the ranking only depends on their ratios."""
    s = sum(w)
    return tuple(round(x / s, 6) for x in w)  # type: ignore[return-value]


@dataclass
class CostModel:
    """Measured cost of the compiled rerank: ``call_s + ns * rows * queries``."""

    scan_ns: float = 0.0
    """ns per (row x query) over contiguous rows (the exact scan of the whole store)."""
    cand_ns: float = 0.0
    """ns per (row x query) over scattered candidate rows (threshold completion, hot candidates)."""
    call_s: float = 0.0
    """Fixed seconds per call (argument checks, allocation, the top-k heap)."""
    measured: bool = False
    live: int = 0
    """Live records when measured."""

    def scan_s(self, rows: int, queries: int) -> float:
        return self.call_s + self.scan_ns * 1e-9 * rows * queries

    def cand_s(self, rows: int, queries: int) -> float:
        return self.call_s + self.cand_ns * 1e-9 * rows * queries


@dataclass
class HnswCurve:
    """Recall@m of the main HNSW index against the exact cosine top-m, on probes."""

    m: int
    """Seed size (neighbours asked for)."""
    points: list[tuple[int, float, float]] = field(default_factory=list)
    """(ef, recall@m, ms per query) measured, widening ef."""
    ef: int | None = None
    """Smallest measured ef whose recall reached the target (None: HNSW not trusted here)."""
    ms: float = float("inf")
    """ms per single query at ``ef``."""
    live: int = 0
    """Live records when measured."""


@dataclass
class ClassCheck:
    """Probe results of one weight class."""

    recall: dict[str, float] = field(default_factory=dict)
    """path -> recall@k against the exact scan on the probes."""
    ms: dict[str, float] = field(default_factory=dict)
    """path -> ms per probe query (all probes in one call)."""
    live: int = 0
    now: float = 0.0


class Planner:
    """Planner state of one store (guarded by the store's mutex)."""

    def __init__(self, probes: int, hnsw_recall_target: float, probe_recall_target: float,
                 recheck_growth: float, recheck_after_s: float) -> None:
        self.probes = probes
        self.hnsw_recall_target = hnsw_recall_target
        self.probe_recall_target = probe_recall_target
        self.recheck_growth = recheck_growth
        self.recheck_after_s = recheck_after_s
        self.cost = CostModel()
        self.curves: dict[int, HnswCurve] = {}
        self.checks: dict[tuple, ClassCheck] = {}
        self.backoff: dict[tuple, list[int]] = {}
        """(weight class, filter, batched) -> [calls left, window]: scan verdicts (see :meth:`lost`)."""
        self.seen: set[tuple] = set()
        """Keys whose first threshold search is behind them (that one gives no verdict)."""
        self.calibration_s = 0.0
        """Seconds spent on probe checks and curves so far (monitoring)."""

    # ---------------------------------------------------------------- staleness
    def _stale(self, live_then: int, live: int) -> bool:
        return live_then == 0 or abs(live - live_then) > self.recheck_growth * live_then

    def curve(self, m: int, live: int) -> HnswCurve | None:
        """The measured curve for ``m`` if still current, else None (the caller measures)."""
        c = self.curves.get(m)
        return None if c is None or self._stale(c.live, live) else c

    def check(self, cls: tuple, live: int, now: float) -> ClassCheck | None:
        c = self.checks.get(cls)
        if c is None or self._stale(c.live, live) or abs(now - c.now) > self.recheck_after_s:
            return None
        return c

    def passes(self, chk: ClassCheck, path: str) -> bool:
        return chk.recall.get(path, 0.0) >= self.probe_recall_target

    # ---------------------------------------------------------------- scan verdicts
    def scanning(self, key: tuple) -> bool:
        """Whether calls for ``key`` = (class, filter, batched) go straight to the scan now: after a
        threshold search for the key lost to the scan, the next ``window`` calls scan (counted
        down here), then one search is retried."""
        b = self.backoff.get(key)
        if b is None or b[0] <= 0:
            return False
        b[0] -= 1
        return True

    def lost(self, key: tuple) -> None:
        """A threshold search for ``key`` fell back to the scan or took longer than it: scan for a
        window of calls, twice as long as the last one (16 up to 1024 calls), so a retry costs
        a vanishing share of the calls. The first search of a key gives no verdict: it pays for
        lazily built lists and caches (the per-agent level lists, filter masks)."""
        if key not in self.seen:
            self.seen.add(key)
            return
        b = self.backoff.get(key)
        window = 16 if b is None else min(2 * b[1], 1024)
        self.backoff[key] = [window, window]

    def won(self, key: tuple) -> None:
        """A threshold search for ``key`` beat the scan: the window starts again from 16."""
        self.seen.add(key)
        self.backoff.pop(key, None)


def recall_at(got: list[np.ndarray], want: list[np.ndarray], k: int) -> float:
    """Mean |got ∩ want| / |want| over queries (lists of row arrays, at most k each)."""
    vals = []
    for g, w in zip(got, want):
        w = w[:k]
        if len(w):
            vals.append(len(set(g[:k].tolist()) & set(w.tolist())) / len(w))
    return float(np.mean(vals)) if vals else 1.0


def drop_self(rows: np.ndarray, scores: np.ndarray | None, self_rows: np.ndarray, k: int) -> list[np.ndarray]:
    """Per probe, its result rows [k+1] without the probe's own row (and padding), first k."""
    out = []
    for r, me in zip(rows, self_rows):
        r = r[(r >= 0) & (r != me)]
        out.append(r[:k])
    return out


class Timer:
    """``with Timer() as t: ...; t.s`` seconds."""

    def __enter__(self) -> "Timer":
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.s = time.perf_counter() - self.t0
