"""Configuration of the memory store (docs/design.md §1.4)."""
from __future__ import annotations

from dataclasses import dataclass

from metacog_fast.ops.memory.naive import DECAY, UNIT_SECONDS


@dataclass(frozen=True)
class MemoryConfig:
    """Settings of a :class:`~metacog_fast.memory.MemoryStore`. Stored-format settings
    (``dim``, ``M``, ``ef_construction``) must match the files on reopen; the rest may change."""

    dim: int = 384
    """Embedding size (MiniLM-L6: 384)."""
    M: int = 16
    """HNSW graph degree (hnswlib ``M``)."""
    ef_construction: int = 200
    """HNSW build-time beam width."""
    ef: int = 96
    """HNSW query beam width; raised to the candidate count k' when that is larger."""
    candidate_factor: int = 4
    """HNSW candidates per query: k' = max(k * candidate_factor, min_candidates)."""
    min_candidates: int = 64
    """Lower bound of k' (see ``candidate_factor``)."""
    fast_path: str = "auto"
    """Approximate retrieval: "auto" (the planner, metacog_fast/memory/planner.py: per call the cheapest
    of the exact scan, the threshold search and the hot path that keeps the measured recall), or one
    path forced (comparisons): "hot" (HNSW top-k' + the hot set, a bounded count; recall measured) or
    "bound" (HNSW top-k' + every recent/important record that could still reach the top-k)."""
    planner_probes: int = 16
    """fast_path "auto": probe queries (stored records, themselves left out) per weight-class check;
    twice as many for an HNSW recall curve."""
    probe_recall_target: float = 0.98
    """fast_path "auto": an approximate path (hot, HNSW-capped threshold) is used for a weight class
    only if its recall@k against the exact scan on the probes reached this."""
    hnsw_recall_target: float = 0.98
    """fast_path "auto": the HNSW cap is used at the smallest measured beam whose recall@m (against
    the exact cosine top-m on the probes) reached this; none: HNSW is not trusted on this store."""
    seed_m: int = 64
    """fast_path "auto": HNSW neighbours seeding the threshold search (first rung)."""
    seed_m_wide: int = 512
    """fast_path "auto": the second rung, when the first leaves a large completion."""
    ef_max: int = 4096
    """fast_path "auto": widest beam the HNSW recall curve tries."""
    recheck_growth: float = 0.25
    """fast_path "auto": redo probe checks and curves after the store grew or shrank by this fraction."""
    hot_main_k: int = 16
    """fast_path "hot", when w_rel <= w_rec + w_imp: main-index HNSW candidates per query (at least k).
    16 and 32 (the earlier default, at beam 40) give the same recall@10 on the 1M benchmark stores
    (200 queries at (1, 1, 1): 0.9905 both; every hot-path weighting within 0.006) and 16 makes a
    25-query call 1.3x faster (docs/memory.md)."""
    hot_main_ef: int = 16
    """fast_path "hot", when w_rel <= w_rec + w_imp: main-index beam width (at least the candidate
    count). Otherwise (relevance dominates the score) and on the "bound" path ``ef`` applies."""
    hot_fraction: float = 0.02
    """Hot set size as a fraction of the live records (records with the highest recency + importance)."""
    hot_min: int = 1024
    """Hot set size lower bound (records)."""
    hot_k: int = 32
    """Hot records taken per query (nearest by cosine in the hot index; also its ``ef``)."""
    hot_top: int = 512
    """Hot records of highest recency + importance taken for every query, whatever their relevance."""
    hot_scan_max: int = 2048
    """When at most this many hot records pass the filter, all of them are reranked (no hot HNSW)."""
    hot_pending_max: int = 512
    """Newly hot records wait in a list scanned exactly; past this many they enter the hot index in one batch."""
    hot_rebuild_after: float = 6 * 3600.0
    """Rebuild the hot set when simulation time moved this many seconds from its reference time."""
    hot_ef_construction: int = 100
    """Build-time beam width of the hot index."""
    head: int = 4
    """fast_path "bound": most recent records taken from each importance bucket to seed the score threshold."""
    exact_below: int = 2048
    """When at most this many live records pass the filter, retrieval scans them all (exact)."""
    exact_filtered_below: int = 65536
    """With an agent/kind/since filter, scan exactly when at most this many records pass: hnswlib's
    filtered search calls a Python function per visited node, slower than the compiled scan below
    ~60k records (1M store, one agent's 40k records: 12 ms scan vs 26 ms filtered HNSW, loaded machine)."""
    save_every: int = 50_000
    """Save the HNSW index after this many added records since the last save (0 = only flush/close)."""
    synchronous: str = "FULL"
    """SQLite ``PRAGMA synchronous``: FULL survives power loss; NORMAL survives a killed process only."""
    decay: float = DECAY
    """Recency decay per ``unit`` (docs/design.md: 0.995)."""
    unit: float = UNIT_SECONDS
    """Recency unit in seconds of simulation time (docs/design.md: 1 hour = 3600 s)."""
    verify_checksum: bool = True
    """On open, check the index file's sha256 against the sidecar (reads the whole file; catches any
    damage). False still checks the parameters, the size and hnswlib's structure (neighbour ids and
    levels in range, labels = the database's records) before hnswlib reads the file, so a damaged
    index never crashes; it misses damage inside the vectors only (docs/memory.md)."""
    num_threads: int = 0
    """hnswlib threads for adds and batched queries (0 = all cores)."""
    backend: str = "auto"
    """Rerank kernel backend: "auto" (compiled "cpu" when built, else "torch"), "cpu" or "torch"."""
    access_flush_every: int = 10_000
    """Write pending ``last_access`` updates to SQLite after this many (also on add, flush and close)."""

    def __post_init__(self) -> None:
        if self.dim < 1:
            raise ValueError(f"dim: expected a positive embedding size, got {self.dim}")
        if self.M < 2 or self.ef_construction < 1 or self.ef < 1:
            raise ValueError("M, ef_construction, ef: expected M >= 2 and positive beam widths")
        if self.candidate_factor < 1 or self.min_candidates < 1 or self.head < 0:
            raise ValueError("candidate_factor, min_candidates: expected >= 1; head: expected >= 0")
        if self.fast_path not in ("auto", "hot", "bound"):
            raise ValueError(f"fast_path: expected 'auto', 'hot' or 'bound', got {self.fast_path!r}")
        if self.planner_probes < 1 or self.seed_m < 1 or self.seed_m_wide < self.seed_m or self.ef_max < 1:
            raise ValueError("planner_probes, seed_m, ef_max: expected >= 1; seed_m_wide: expected >= seed_m")
        if not (0.0 < self.probe_recall_target <= 1.0 and 0.0 < self.hnsw_recall_target <= 1.0):
            raise ValueError("probe_recall_target, hnsw_recall_target: expected in (0, 1]")
        if not self.recheck_growth > 0:
            raise ValueError("recheck_growth: expected > 0")
        if not (0.0 < self.hot_fraction <= 1.0) or self.hot_min < 1 or self.hot_k < 1 or self.hot_scan_max < 0 or self.hot_top < 0:
            raise ValueError("hot_fraction: expected (0, 1]; hot_min, hot_k: expected >= 1; hot_scan_max, hot_top: >= 0")
        if self.exact_below < 0 or self.exact_filtered_below < 0:
            raise ValueError("exact_below, exact_filtered_below: expected >= 0 records")
        if self.hot_main_k < 1 or self.hot_main_ef < 1:
            raise ValueError("hot_main_k, hot_main_ef: expected >= 1")
        if self.hot_pending_max < 1 or not (self.hot_rebuild_after > 0) or self.hot_ef_construction < 1:
            raise ValueError("hot_pending_max, hot_ef_construction: expected >= 1; hot_rebuild_after: > 0 seconds")
        if self.synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(f"synchronous: expected OFF, NORMAL, FULL or EXTRA, got {self.synchronous!r}")
        if not (0.0 < self.decay <= 1.0) or self.unit <= 0:
            raise ValueError("decay: expected 0 < decay <= 1; unit: expected > 0 seconds")
