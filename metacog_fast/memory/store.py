"""The long-term memory store (docs/design.md §1.4): SQLite records + hnswlib index +
in-memory columns, with the generative-agents retrieval score.

Times are seconds of simulation time (floats); recency decays by ``decay`` per
``unit`` (0.995 per hour). Embeddings are [N, dim] float32 (any scale: cosine).

:class:`MemoryStore` is the façade; each of its parts has a module of its own:

* :mod:`.lockfile`      the store's one-writer lock (``<db>.lock``, held from open to close);
* :mod:`.db`            the SQLite table (records, seq, backup);
* :mod:`.table`         the in-memory columns (unit keys, int8 codes, times, importance, codes);
* :mod:`.records`       :class:`MemoryRecord` and the load of SQLite rows into the columns;
* :mod:`.main_index`    the HNSW index's lifecycle (load / catch up / rebuild, seq, save, beam), with
  :mod:`.index` (files, sidecar) and :mod:`.index_check` (the file's structure, before hnswlib reads it);
* :mod:`.buckets`, :mod:`.hot`  the recency lists per importance bucket and the hot set;
* :mod:`.filters`       rows and hnswlib filters per agent/kind/since key;
* :mod:`.retrieval`     the retrieve entry, the exact scan, the kernels; with :mod:`.threshold_search`,
  :mod:`.hot_path`, :mod:`.calibration` (:mod:`.planner`'s measurements) and :mod:`.forced_paths`;
* :mod:`.access`        ``last_access`` updates waiting for SQLite;
* :mod:`.checks`        the checks of every public argument;
* :mod:`.rwlock`        the readers-writer lock (adds and forgets exclude retrievals).
"""
from __future__ import annotations

import contextlib
import math
import time
import os
import threading
from dataclasses import fields, replace
from typing import Any, Callable, Sequence

import numpy as np

from metacog_fast.memory import buckets as bk
from metacog_fast.memory import checks as ck
from metacog_fast.memory import index as hx
from metacog_fast.memory.access import PendingAccess
from metacog_fast.memory.config import MemoryConfig
from metacog_fast.memory.db import Database, dumps_meta
from metacog_fast.memory.filters import FilterCache
from metacog_fast.memory.hot import HotSet
from metacog_fast.memory.lockfile import StoreLock
from metacog_fast.memory.main_index import MainIndex
from metacog_fast.memory.planner import ClassCheck, HnswCurve, Planner
from metacog_fast.memory.records import MemoryRecord, ingest, record_of
from metacog_fast.memory.retrieval import Retriever
from metacog_fast.memory.rwlock import RWLock
from metacog_fast.memory.table import Table

__all__ = ["FILTER_KEYS", "MemoryRecord", "MemoryStore"]

FILTER_KEYS = ("agent", "kind", "since")


class MemoryStore:
    """Open with :meth:`open`; use as a context manager or call :meth:`close`."""

    def __init__(self, path: str, config: MemoryConfig) -> None:
        self.path = os.fspath(path)
        self.config = config
        self.index_path = self.path + ".hnsw"
        self.open_report: dict[str, Any] = {}
        self._closed = True
        self._pid = os.getpid()
        self._owner = StoreLock(self.path).acquire()  # one writer per store, before any file is read
        self._db: Database | None = None
        try:
            hx.check_database_present(self.path, self.index_path)
            self._build(config)
        except BaseException:
            if self._db is not None:
                self._db.close()
            self._owner.release()
            raise

    def _build(self, config: MemoryConfig) -> None:
        self._lock = RWLock()
        self._mutate = threading.Lock()  # candidate lists, last_access updates, SQLite
        self._db = Database(self.path, config.dim, config.synchronous)
        self._table = Table(config.dim)
        self._lists = bk.BucketLists(self._table)
        self._main = MainIndex(self.index_path, config)
        self._hot = HotSet(self._table, config, self._main.threads())
        self._pending = PendingAccess()
        self._filters = FilterCache(self._table)
        self._retriever = Retriever(config, self._table, self._lists, self._hot, self._main, self._filters,
                                    self._mutate)
        self._closed = False
        self._load()

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | os.PathLike, dim: int = 384, config: MemoryConfig | None = None,
             **overrides: Any) -> "MemoryStore":
        """Open (or create) the store at ``path`` (SQLite file; the index lives at ``path + '.hnsw'``).

        ``config`` fields may also be given as keywords (``M=32, ef=128``). A missing,
        stale or corrupt index is rebuilt from SQLite; ``store.open_report`` says which.

        The store is locked for this object until :meth:`close` (docs/memory.md, "Concurrency"): a
        second open of ``path``, from any process, raises
        :class:`~metacog_fast.memory.lockfile.StoreLockedError` naming the holder. A database older
        than its index (missing, emptied, an older copy) raises
        :class:`~metacog_fast.memory.index.StaleDatabaseError` with the recovery steps.
        """
        cfg = config or MemoryConfig(dim=dim)
        if config is not None and dim != 384 and dim != config.dim:
            raise ValueError(f"dim: {dim} conflicts with config.dim={config.dim}")
        names = {f.name for f in fields(MemoryConfig)}
        unknown = set(overrides) - names
        if unknown:
            raise TypeError(f"unknown MemoryConfig field(s) {sorted(unknown)}; known: {sorted(names)}")
        if overrides:
            cfg = replace(cfg, **overrides)
        return cls(path, cfg)

    def _load(self) -> None:
        t0 = time.perf_counter()
        hx.remove_stale_temps(self.index_path)
        for rows in self._db.scan():
            ingest(self._table, self._lists, rows, self.config.dim)
        self.open_report["records"] = self._table.live
        self.open_report["load_records_s"] = time.perf_counter() - t0
        seq, forget_seq = self._db.seq()
        self._main.open(self._table, seq, forget_seq, self.open_report, self.path)
        self.open_report["open_s"] = time.perf_counter() - t0
        if self._main.behind():
            self._save_index()

    # ---------------------------------------------------------------- writing
    def add(self, embeddings: Any, importance: Any, created: Any, agent: Any, kind: Any,
            text: Any = None, location: Any = None, meta: Any = None) -> np.ndarray:
        """Add N records; returns their ids [N] int64 once committed to SQLite.

        embeddings [N, dim] (or [dim]); importance, created (seconds), agent, kind,
        text, location, meta: one value each or a sequence of N (scalars broadcast).
        ``last_access`` starts at ``created``.
        """
        self._check_open()
        emb = ck.embeddings(embeddings, self.config.dim, "embeddings")
        n = emb.shape[0]
        imp = ck.importance(ck.broadcast_num(importance, n, "importance"), "importance")
        cre = ck.broadcast_num(created, n, "created")
        if not np.isfinite(cre).all():
            raise ValueError("created: expected finite times in seconds")
        agents = ck.broadcast_str(agent, n, "agent", required=True)
        kinds = ck.broadcast_str(kind, n, "kind", required=True)
        texts = ck.broadcast_str(text, n, "text")
        locs = ck.broadcast_str(location, n, "location")
        metas = [dumps_meta(m, "meta") for m in ck.broadcast_obj(meta, n, "meta")]
        if n == 0:
            return np.empty(0, np.int64)
        keys = ck.normalise(emb)
        rows = [(agents[i], kinds[i], texts[i], locs[i], float(cre[i]), float(cre[i]), float(imp[i]),
                 emb[i].tobytes(), metas[i]) for i in range(n)]
        with self._lock.write():
            with self._mutate:
                ids, seq = self._db.insert(rows, self._pending.take())
            t = self._table
            trows = t.insert(ids, keys, cre, cre.copy(), imp,
                             np.array([t.agents.get(a) for a in agents], np.int32),
                             np.array([t.kinds.get(k) for k in kinds], np.int32))
            self._lists.push(trows)
            self._hot.note(trows)
            self._main.add(keys, ids, seq)
            self._filters.bump()
            if self._main.save_due():
                self._save_index()
        return ids

    def update_importance(self, ids: Any, values: Any) -> None:
        """Set the importance of live records ``ids`` [N] to ``values`` (scalar or [N], in [1, 10])."""
        self._check_open()
        ids = ck.ids(ids)
        vals = ck.importance(ck.broadcast_num(values, len(ids), "values"), "values")
        with self._lock.write():
            rows = self._live_rows(ids)
            with self._mutate:
                self._db.set_importance(ids, vals)
            self._table.set_importance(rows, vals)
            self._lists.push(rows)
            self._hot.note(rows)

    def forget(self, ids: Any = None, *, agent: str | None = None, kind: str | None = None,
               before: float | None = None) -> int:
        """Delete records: the given ``ids``, or every record matching agent/kind/created < before.
        Returns how many were deleted. Unknown ids are ignored."""
        self._check_open()
        if ids is not None and (agent is not None or kind is not None or before is not None):
            raise ValueError("forget: give either ids or agent/kind/before, not both")
        with self._lock.write():
            if ids is None:
                if agent is None and kind is None and before is None:
                    raise ValueError("forget: give ids or at least one of agent, kind, before")
                where, args = [], []
                for col, val in (("agent", agent), ("kind", kind)):
                    if val is not None:
                        where.append(f"{col}=?")
                        args.append(str(val))
                if before is not None:
                    where.append("created<?")
                    args.append(float(before))
                with self._mutate:
                    ids = self._db.select_ids(" AND ".join(where), tuple(args))
            ids = ck.ids(ids)
            rows = self._table.rows_of(ids)
            ids = ids[rows >= 0]
            if len(ids) == 0:
                return 0
            with self._mutate:
                seq = self._db.delete(ids)
                self._pending.drop(ids.tolist())
            self._hot.remove(rows[rows >= 0])
            self._table.remove(ids)
            self._main.remove(ids, seq)
            self._filters.bump()
            return len(ids)

    # ---------------------------------------------------------------- reading
    def __len__(self) -> int:
        return self._table.live

    def get(self, ids: Any) -> list[MemoryRecord | None]:
        """Records for ``ids`` (``None`` where an id is unknown or forgotten)."""
        self._check_open()
        ids = ck.ids(ids)
        with self._lock.read(), self._mutate:
            self._flush_access()
            got = self._db.fetch(ids)
        return [None if got.get(i) is None else record_of(got[i]) for i in ids.tolist()]

    def retrieve(self, queries: Any, k: int, now: float, agent: str | None = None, kind: str | None = None,
                 since: float | None = None, weights: Sequence[float] = (1.0, 1.0, 1.0), exact: bool = False,
                 touch: bool = True, **unknown: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-k memories of the docs/design.md §1.4 score for each query.

        queries [Q, dim] (or [dim]); filters: ``agent``, ``kind``, ``since`` (created >= since).
        Returns Q pairs (ids [<=k] int64, scores [<=k] float32), best first, and sets
        ``last_access`` of every returned record to ``now`` (``touch=False``: a read-only
        peek). ``exact=True`` scores every record under the filter (the brute-force reference).
        ``weights`` (w_rec, w_rel, w_imp): finite, >= 0, not all 0. ``k`` >= 1; a ``k`` above the
        number of records is clamped to it (no work or memory is sized by a larger ``k``).
        """
        if unknown:
            raise ValueError(f"unknown filter key(s) {sorted(unknown)}: expected {FILTER_KEYS}")
        self._check_open()
        k = int(k)
        if k < 1:
            raise ValueError(f"k: expected k >= 1, got {k}")
        now = float(now)
        if not math.isfinite(now):
            raise ValueError(f"now: expected a finite time in seconds, got {now}")
        w = tuple(float(x) for x in weights)
        if len(w) != 3 or not all(math.isfinite(x) and x >= 0 for x in w) or not any(w):
            raise ValueError(f"weights: expected three finite non-negative (w_rec, w_rel, w_imp), not all 0, "
                             f"got {weights!r}")
        if since is not None and not math.isfinite(float(since)):
            raise ValueError(f"since: expected a finite time in seconds, got {since!r}")
        q = ck.unit_queries(queries, self.config.dim, "queries")
        with self._lock.read():
            k = min(k, max(self._table.live, 1))
            rows, scores = self._retriever.rows(q, k, now, agent, kind, since, w, exact)
            with self._mutate:
                return self._finish(rows, scores, now, touch)

    def _finish(self, rows: np.ndarray, scores: np.ndarray, now: float,
                touch: bool) -> list[tuple[np.ndarray, np.ndarray]]:
        """Rows [Q, k] (-1 padded) and scores -> Q (ids, scores) pairs; ``touch``: the returned
        records' last_access becomes ``now`` (in memory at once, in SQLite in batches)."""
        t = self._table
        out = []
        touched = []
        for r, s in zip(rows, scores):
            ok = r >= 0
            r, s = r[ok], s[ok]
            out.append((t.row_id[r].copy(), s.copy()))
            touched.append(r)
        if touched and touch:
            u = np.unique(np.concatenate(touched))
            if len(u):
                t.last_access[u] = now
                self._lists.push(u)
                self._hot.note(u)
                self._pending.touch(t.row_id[u].tolist(), now)
                if len(self._pending) >= self.config.access_flush_every:
                    self._flush_access()
        return out

    @property
    def last_candidates(self) -> int:
        """Candidate columns reranked by the last approximate retrieval (monitoring, benchmarks)."""
        return self._retriever.last_candidates

    @last_candidates.setter
    def last_candidates(self, value: int) -> None:
        self._retriever.last_candidates = value

    @property
    def last_plan(self) -> dict[str, Any]:
        """What the planner did in the last retrieval (path, completion cap, candidates; monitoring)."""
        return self._retriever.last_plan

    @last_plan.setter
    def last_plan(self, value: dict[str, Any]) -> None:
        self._retriever.last_plan = value

    # ---------------------------------------------------------------- persistence
    def _flush_access(self) -> None:
        if len(self._pending):
            self._db.write_access(self._pending.take())

    def _save_index(self) -> None:
        self._main.save(self._table)

    def flush(self) -> None:
        """Write pending last_access updates and save the index (atomically) if it changed."""
        self._check_open()
        with self._lock.write():
            with self._mutate:
                self._flush_access()
            if self._main.behind():
                self._save_index()

    def backup(self, path: str | os.PathLike) -> int:
        """Copy the records to a new SQLite file at ``path`` (SQLite's online backup API), while
        other threads may go on adding and retrieving; returns the number of records copied.

        The copy is one consistent snapshot: every add acknowledged before the call is in it,
        adds running during it are either wholly in it or not. Pending ``last_access`` updates
        are written first. The index is not copied (it is derived): opening the copy with
        :meth:`open` rebuilds it. The copy is written to a temp file and renamed into place.
        ``path`` is locked meanwhile (a store open there raises
        :class:`~metacog_fast.memory.lockfile.StoreLockedError`), and index files left there by an
        earlier database at ``path`` are removed first (they describe the file being replaced).
        """
        self._check_open()
        target = ck.backup_target(path, self.path)
        owner = StoreLock(target).acquire()
        try:
            for p in (target + ".hnsw", target + ".hnsw.json"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(p)
            with self._mutate:
                self._flush_access()
            return self._db.backup(target)
        finally:
            owner.release()

    def close(self) -> None:
        """Flush, close and release the store's lock; the store cannot be used afterwards.
        In a process forked from the opener, only forgets this copy (the opener keeps the lock)."""
        if self._closed:
            return
        if os.getpid() != self._pid:
            self._closed = True
            self._owner.forget_inherited()
            return
        try:
            self.flush()
        finally:
            self._closed = True
            try:
                self._db.close()
            finally:
                self._owner.release()

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MemoryStore is closed")
        if os.getpid() != self._pid:
            raise RuntimeError(f"MemoryStore {self.path} was opened by process {self._pid} and cannot be used "
                               f"from process {os.getpid()} (a forked copy); open the store in this process "
                               f"after the opener closed it")

    def _live_rows(self, ids: np.ndarray) -> np.ndarray:
        rows = self._table.rows_of(ids)
        if (rows < 0).any():
            raise KeyError(f"ids: not live records: {ids[rows < 0][:10].tolist()}")
        return rows

    def stats(self) -> dict[str, Any]:
        """Counts and sizes (for monitoring and benchmarks)."""
        return {"records": len(self), "index_elements": self._index.element_count,
                "index_capacity": self._index.max_elements, "agents": len(self._table.agents.names)}

    # ---------------------------------------------------------------- internals, for tests and benchmarks
    @property
    def _index(self):
        """The main hnswlib index."""
        return self._main.index

    @property
    def _index_seq(self) -> int:
        """Database seq the saved index file matches (-1: behind)."""
        return self._main.seq

    @property
    def _planner(self) -> Planner:
        return self._retriever.planner

    def _filter(self, key: tuple, need_rows: bool) -> tuple[int, np.ndarray | None, Callable[[int], bool] | None]:
        return self._filters.filter(key, need_rows)

    def _all_rows(self, key: tuple) -> np.ndarray:
        return self._filters.all_rows(key)

    def _scan(self, q: np.ndarray, key: tuple, k: int, now: float, w: tuple[float, float, float],
              plain: bool = False):
        return self._retriever.scan(q, key, k, now, w, plain)

    def _threshold(self, q: np.ndarray, k: int, now: float, w: tuple[float, float, float], key: tuple,
                   n_match: int, cls: tuple, mkey: tuple | None, approx: bool | None, locked: bool = False,
                   allow_scan: bool = True):
        return self._retriever.threshold(q, k, now, w, key, n_match, cls, mkey, approx, locked, allow_scan)

    def _ensure_costs(self) -> None:
        self._retriever.ensure_costs()

    def _curve(self, m: int) -> HnswCurve:
        return self._retriever.curve(m)

    def _class_check(self, cls: tuple, k: int, now: float, w: tuple[float, float, float]) -> ClassCheck:
        return self._retriever.class_check(cls, k, now, w)
