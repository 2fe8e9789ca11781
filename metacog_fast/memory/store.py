"""The long-term memory store (docs/design.md §1.4): SQLite records + hnswlib index +
in-memory columns, with the generative-agents retrieval score.

Times are seconds of simulation time (floats); recency decays by ``decay`` per
``unit`` (0.995 per hour). Embeddings are [N, dim] float32 (any scale: cosine).
"""
from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Sequence

import numpy as np

from metacog_fast.ops.memory import api as memory_ops
from metacog_fast.memory import buckets as bk
from metacog_fast.memory.hot import HotSet
from metacog_fast.memory import index as hx
from metacog_fast.memory import threshold as thr
from metacog_fast.memory.planner import ClassCheck, HnswCurve, Planner, Timer, drop_self, recall_at, weight_class
from metacog_fast.memory.config import MemoryConfig
from metacog_fast.memory.db import Database, dumps_meta
from metacog_fast.memory.rwlock import RWLock
from metacog_fast.memory.table import Table

FILTER_KEYS = ("agent", "kind", "since")


@dataclass(frozen=True)
class MemoryRecord:
    """One stored memory, as returned by :meth:`MemoryStore.get`."""

    id: int
    """Record id (never reused)."""
    agent: str
    """Owner agent."""
    kind: str
    """Memory type (observation, reflection, plan, ...)."""
    text: str | None
    """Natural-language content."""
    location: str | None
    """Where it happened."""
    created: float
    """Creation time, seconds of simulation time."""
    last_access: float
    """Last retrieval (or creation) time, seconds."""
    importance: float
    """Importance in [1, 10]."""
    embedding: np.ndarray
    """[dim] float32, as given to ``add``."""
    meta: Any
    """Free JSON fields (``None`` if none)."""


class MemoryStore:
    """Open with :meth:`open`; use as a context manager or call :meth:`close`."""

    def __init__(self, path: str, config: MemoryConfig) -> None:
        self.path = os.fspath(path)
        self.config = config
        self.index_path = self.path + ".hnsw"
        self.open_report: dict[str, Any] = {}
        self._lock = RWLock()
        self._mutate = threading.Lock()  # candidate lists, last_access updates, SQLite
        self._hnsw_lock = threading.Lock()  # hnswlib keeps one ef per index: set + query as one step
        self._db = Database(self.path, config.dim, config.synchronous)
        self._table = Table(config.dim)
        self._lists = bk.BucketLists(self._table)
        self._hot = HotSet(self._table, config, self._threads())
        self._pending_access: dict[int, float] = {}
        self._added_since_save = 0
        self._gen = 0  # bumped by every add/forget: invalidates cached filter masks
        self._mask_cache: dict[tuple, tuple[int, int, np.ndarray, Callable[[int], bool]]] = {}
        self._closed = False
        self.last_candidates = 0
        """Candidate columns reranked by the last approximate retrieval (monitoring, benchmarks)."""
        self.last_plan: dict[str, Any] = {}
        """What the planner did in the last retrieval (path, completion cap, candidates; monitoring)."""
        self._planner = Planner(config.planner_probes, config.hnsw_recall_target, config.probe_recall_target,
                                config.recheck_growth, config.hot_rebuild_after)
        # Resolved once; the store validates its own columns, so it takes the kernels' unchecked path.
        self._backend = memory_ops.TABLE.resolve(config.backend)
        self._load()

    # ---------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | os.PathLike, dim: int = 384, config: MemoryConfig | None = None,
             **overrides: Any) -> "MemoryStore":
        """Open (or create) the store at ``path`` (SQLite file; the index lives at ``path + '.hnsw'``).

        ``config`` fields may also be given as keywords (``M=32, ef=128``). A missing,
        stale or corrupt index is rebuilt from SQLite; ``store.open_report`` says which.
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

    def _params(self) -> dict:
        c = self.config
        return {"dim": c.dim, "M": c.M, "ef_construction": c.ef_construction, "space": "cosine"}

    def _load(self) -> None:
        import time

        t0 = time.perf_counter()
        t = self._table
        hx.remove_stale_temps(self.index_path)
        for rows in self._db.scan():
            self._ingest(rows)
        self.open_report["records"] = t.live
        self.open_report["load_records_s"] = time.perf_counter() - t0
        seq, forget_seq = self._db.seq()
        side, why = hx.check_sidecar(self.index_path, self._params(), self.config.verify_checksum)
        idx = None
        if side is not None:
            if side.seq > seq:
                why = f"index seq {side.seq} is ahead of the database seq {seq}"
            elif side.seq < forget_seq:
                why = f"records were forgotten after the index was saved (seq {side.seq} < {forget_seq})"
            else:
                try:
                    idx = hx.load(self.index_path, self.config.dim, t.live + 1024)
                except Exception as exc:  # hnswlib raises RuntimeError on a damaged file
                    why = f"index file failed to load ({exc})"
                    idx = None
        if idx is not None and side is not None:
            late = t.row_id[: t.end]
            late = np.sort(late[late > side.max_id])
            if len(late):
                hx.ensure_capacity(idx, len(late))
                idx.add_items(t.keys[t.id_to_row[late]], late, num_threads=self._threads(), replace_deleted=True)
            self.open_report["index"] = "loaded" if not len(late) else f"loaded, caught up {len(late)} records"
            self._index_seq = side.seq if not len(late) else -1
        else:
            idx = hx.new_index(self.config.dim, t.live + 1024, self.config.M, self.config.ef_construction)
            ids = t.row_id[: t.end]
            ids = ids[ids >= 0]
            if len(ids):
                idx.add_items(t.keys[t.id_to_row[ids]], ids, num_threads=self._threads(), replace_deleted=True)
            self.open_report["index"] = f"rebuilt ({why})"
            self._index_seq = -1
        self._index = idx
        self._index.set_ef(self.config.ef)
        self.open_report["open_s"] = time.perf_counter() - t0
        if self._index_seq != seq:
            self._save_index()

    def _ingest(self, rows: list[tuple]) -> None:
        t = self._table
        ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
        emb = np.frombuffer(b"".join(r[6] for r in rows), np.float32).reshape(len(rows), self.config.dim)
        keys = _normalise(emb)
        rws = t.insert(
            ids, keys,
            np.fromiter((r[3] for r in rows), np.float64, len(rows)),
            np.fromiter((r[4] for r in rows), np.float64, len(rows)),
            np.fromiter((r[5] for r in rows), np.float32, len(rows)),
            np.fromiter((t.agents.get(r[1]) for r in rows), np.int32, len(rows)),
            np.fromiter((t.kinds.get(r[2]) for r in rows), np.int32, len(rows)),
        )
        self._lists.push(rws)

    def _threads(self) -> int:
        return self.config.num_threads if self.config.num_threads > 0 else -1

    # ---------------------------------------------------------------- writing
    def add(self, embeddings: Any, importance: Any, created: Any, agent: Any, kind: Any,
            text: Any = None, location: Any = None, meta: Any = None) -> np.ndarray:
        """Add N records; returns their ids [N] int64 once committed to SQLite.

        embeddings [N, dim] (or [dim]); importance, created (seconds), agent, kind,
        text, location, meta: one value each or a sequence of N (scalars broadcast).
        ``last_access`` starts at ``created``.
        """
        self._check_open()
        emb = _embeddings(embeddings, self.config.dim, "embeddings")
        n = emb.shape[0]
        imp = _importance(_broadcast_num(importance, n, "importance"), "importance")
        cre = _broadcast_num(created, n, "created")
        if not np.isfinite(cre).all():
            raise ValueError("created: expected finite times in seconds")
        agents = _broadcast_str(agent, n, "agent", required=True)
        kinds = _broadcast_str(kind, n, "kind", required=True)
        texts = _broadcast_str(text, n, "text")
        locs = _broadcast_str(location, n, "location")
        metas = [dumps_meta(m, "meta") for m in _broadcast_obj(meta, n, "meta")]
        if n == 0:
            return np.empty(0, np.int64)
        keys = _normalise(emb)
        rows = [(agents[i], kinds[i], texts[i], locs[i], float(cre[i]), float(cre[i]), float(imp[i]),
                 emb[i].tobytes(), metas[i]) for i in range(n)]
        with self._lock.write():
            with self._mutate:
                pending = self._take_pending()
                ids = self._db.insert(rows, pending)
            t = self._table
            trows = t.insert(ids, keys, cre, cre.copy(), imp,
                             np.array([t.agents.get(a) for a in agents], np.int32),
                             np.array([t.kinds.get(k) for k in kinds], np.int32))
            self._lists.push(trows)
            self._hot.note(trows)
            hx.ensure_capacity(self._index, n)
            self._index.add_items(keys, ids, num_threads=self._threads(), replace_deleted=True)
            self._gen += 1
            self._added_since_save += n
            if self.config.save_every and self._added_since_save >= self.config.save_every:
                self._save_index()
        return ids

    def update_importance(self, ids: Any, values: Any) -> None:
        """Set the importance of live records ``ids`` [N] to ``values`` (scalar or [N], in [1, 10])."""
        self._check_open()
        ids = _ids(ids)
        vals = _importance(_broadcast_num(values, len(ids), "values"), "values")
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
            ids = _ids(ids)
            rows = self._table.rows_of(ids)
            ids = ids[rows >= 0]
            if len(ids) == 0:
                return 0
            with self._mutate:
                self._db.delete(ids)
                for i in ids.tolist():
                    self._pending_access.pop(i, None)
            self._hot.remove(rows[rows >= 0])
            self._table.remove(ids)
            for i in ids.tolist():
                self._index.mark_deleted(i)
            self._gen += 1
            return len(ids)

    # ---------------------------------------------------------------- reading
    def __len__(self) -> int:
        return self._table.live

    def get(self, ids: Any) -> list[MemoryRecord | None]:
        """Records for ``ids`` (``None`` where an id is unknown or forgotten)."""
        self._check_open()
        ids = _ids(ids)
        with self._lock.read(), self._mutate:
            self._flush_access()
            got = self._db.fetch(ids)
        out: list[MemoryRecord | None] = []
        for i in ids.tolist():
            r = got.get(i)
            if r is None:
                out.append(None)
                continue
            out.append(MemoryRecord(
                id=r[0], agent=r[1], kind=r[2], text=r[3], location=r[4], created=r[5], last_access=r[6],
                importance=r[7], embedding=np.frombuffer(r[8], np.float32).copy(),
                meta=json.loads(r[9]) if r[9] is not None else None))
        return out

    def retrieve(self, queries: Any, k: int, now: float, agent: str | None = None, kind: str | None = None,
                 since: float | None = None, weights: Sequence[float] = (1.0, 1.0, 1.0), exact: bool = False,
                 touch: bool = True, **unknown: Any) -> list[tuple[np.ndarray, np.ndarray]]:
        """Top-k memories of the docs/design.md §1.4 score for each query.

        queries [Q, dim] (or [dim]); filters: ``agent``, ``kind``, ``since`` (created >= since).
        Returns Q pairs (ids [<=k] int64, scores [<=k] float32), best first, and sets
        ``last_access`` of every returned record to ``now`` (``touch=False``: a read-only
        peek). ``exact=True`` scores every record under the filter (the brute-force reference).
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
        if len(w) != 3 or not all(math.isfinite(x) and x >= 0 for x in w):
            raise ValueError(f"weights: expected three finite non-negative (w_rec, w_rel, w_imp), got {weights!r}")
        if since is not None and not math.isfinite(float(since)):
            raise ValueError(f"since: expected a finite time in seconds, got {since!r}")
        q = _unit_queries(queries, self.config.dim, "queries")
        with self._lock.read():
            rows, scores = self._retrieve_rows(q, k, now, agent, kind, since, w, exact)
            with self._mutate:
                return self._finish(rows, scores, now, touch)

    def _retrieve_rows(self, q: np.ndarray, k: int, now: float, agent: str | None, kind: str | None,
                       since: float | None, w: tuple[float, float, float], exact: bool):
        t, c = self._table, self.config
        a_code = None if agent is None else t.agents.find(str(agent))
        k_code = None if kind is None else t.kinds.find(str(kind))
        if (agent is not None and a_code < 0) or (kind is not None and k_code < 0):
            return np.full((len(q), k), -1, np.int64), np.full((len(q), k), -np.inf, np.float32)
        key = (a_code, k_code, None if since is None else float(since))
        if exact:
            with self._mutate:
                self.last_plan = {"path": "exact"}
                return self._scan(q, key, k, now, w, plain=True)
        if c.fast_path == "auto":
            return self._auto(q, k, now, w, key)
        return self._legacy(q, k, now, w, key)

    # ---------------------------------------------------------------- planner ("auto")
    def _auto(self, q: np.ndarray, k: int, now: float, w: tuple[float, float, float], key: tuple):
        """The planner's choice for this call (metacog_fast/memory/planner.py)."""
        P, c, t = self._planner, self.config, self._table
        nq = len(q)
        cls = weight_class(w)
        mkey = (cls, key, nq > 1)
        with self._mutate:
            n_match, _, filt = self._filter(key, need_rows=False)
            self._ensure_costs()
            # Scan when few records pass, or while this key's last threshold search lost to the scan.
            small = n_match <= max(k, c.exact_below)
            if small or P.scanning(mkey):
                self.last_plan = {"path": "scan", "why": "small" if small else "threshold lost to the scan lately"}
                self.last_candidates = n_match
                return self._scan(q, key, k, now, w)
            unfiltered = key == (None, None, None)
            hot_regime = unfiltered and min(w) > 0 and w[1] <= w[0] + w[2]
            if hot_regime:
                chk = self._class_check(cls, k, now, w)
                use_hot = P.passes(chk, "hot") and chk.ms["hot"] <= chk.ms["threshold"]
            else:
                use_hot = False
        if use_hot:
            self.last_plan = {"path": "hot"}
            return self._hot_path(q, k, now, w, key, filt)
        return self._threshold(q, k, now, w, key, n_match, cls, mkey, approx=None)

    def _all_rows(self, key: tuple) -> np.ndarray:
        """Live rows passing ``key`` [M], ascending (cached per store generation); under ``_mutate``."""
        if key != (None, None, None):
            rows = self._filter(key, need_rows=True)[1]
            return rows if rows is not None else self._table.filter_rows(*key)
        hit = self._mask_cache.get("all")
        if hit is not None and hit[0] == self._gen:
            return hit[2]
        rows = self._table.filter_rows(None, None, None)
        self._mask_cache["all"] = (self._gen, len(rows), rows, None)
        return rows

    def _scan(self, q: np.ndarray, key: tuple, k: int, now: float, w: tuple[float, float, float],
              plain: bool = False):
        """Exact: every live record under ``key``; under ``_mutate``. The planner's scan reads the int8
        codes first and scores exactly only what can reach the top-k (same result); ``plain=True``
        (``exact=True``, the reference) scores every record from the float keys."""
        rows = self._all_rows(key)
        if plain or len(rows) < 4096 or self._backend != "cpu":
            return self._rerank(q, rows, k, now, w)
        t, c = self._table, self.config
        out = memory_ops.memory_rerank_bounded(q, t.keys, t.codes, t.qscale, t.qerr, t.last_access, t.importance,
                                               rows, k, now, w, c.decay, c.unit, backend=self._backend, check=False)
        return out[0], out[1]

    def _ensure_costs(self) -> None:
        """Measure the cost model (under ``_mutate``), again after the store grew or shrank by
        ``recheck_growth``: one query over every live row (the scan), over a random sorted quarter
        of them (at most 32k: scattered candidates) and over 16 rows (the fixed cost of a call);
        the best of a few repetitions each, so a busy moment does not set the model."""
        P, t = self._planner, self._table
        cm = P.cost
        if cm.measured and not P._stale(cm.live, t.live):
            return
        rows = self._all_rows((None, None, None))
        if len(rows) < 1024:
            return
        rng = np.random.default_rng(0)
        q = t.keys[rows[:1]]
        scat = np.sort(rng.choice(rows, min(len(rows) // 4, 32768), replace=False))
        tiny = rows[:16]

        def best(r: np.ndarray, reps: int, scan: bool = False) -> float:
            out = np.inf
            for _ in range(reps):
                with Timer() as tm:
                    if scan:  # the planner's scan, as it runs
                        self._scan(q, (None, None, None), 10, 0.0, (1.0, 1.0, 1.0))
                    else:
                        self._rerank(q, r, 10, 0.0, (1.0, 1.0, 1.0))
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
                thr.gather(self._lists, bk.ANY_AGENT, everything).padded()
            g = min(g, tm.s)
        cm.cand_ns += g * 1e9 / len(rows)
        cm.measured, cm.live = True, t.live

    def _probe_rows(self, n: int) -> np.ndarray:
        rows = self._all_rows((None, None, None))
        rng = np.random.default_rng(len(rows))
        return np.sort(rng.choice(rows, min(n, len(rows)), replace=False))

    def _curve(self, m: int) -> HnswCurve:
        """The HNSW recall curve for seed size ``m`` (measured now if missing or stale); under ``_mutate``."""
        P, c, t = self._planner, self.config, self._table
        cur = P.curve(m, t.live)
        if cur is not None:
            return cur
        t0 = time.perf_counter()
        probes = self._probe_rows(2 * P.probes)
        q = t.keys[probes]
        want_rows, _ = self._rerank(q, self._all_rows((None, None, None)), m + 1, 0.0, (0.0, 1.0, 0.0))
        want = drop_self(want_rows, None, probes, m)
        cur = HnswCurve(m=m, live=t.live)
        ef = max(m + 1, c.ef)
        while ef <= max(c.ef_max, m + 1):
            with self._hnsw_lock, Timer() as tm:
                self._index.set_ef(ef)
                labels = np.concatenate([self._index.knn_query(q[i: i + 1], k=m + 1, num_threads=1)[0]
                                         for i in range(len(q))])
                self._index.set_ef(c.ef)
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

    def _class_check(self, cls: tuple, k: int, now: float, w: tuple[float, float, float]) -> ClassCheck:
        """Probe results of the approximate paths for weight class ``cls`` (measured now if missing
        or stale): recall@k against the exact scan and ms per probe; under ``_mutate``."""
        P, t = self._planner, self._table
        chk = P.check(cls, t.live, now)
        if chk is not None:
            return chk
        t0 = time.perf_counter()
        probes = self._probe_rows(P.probes)
        q = t.keys[probes]
        none = (None, None, None)
        want = drop_self(self._scan(q, none, k + 1, now, w)[0], None, probes, k)
        chk = ClassCheck(live=t.live, now=now)
        P.checks[cls] = chk  # present while measuring: the threshold runs below do not recurse
        n = t.live
        runs = [("threshold_hnsw", lambda: self._threshold(q, k + 1, now, w, none, n, cls, None, approx=True,
                                                           locked=True))]
        if min(w) > 0 and w[1] <= w[0] + w[2]:
            runs.append(("hot", lambda: self._hot_path(q, k + 1, now, w, none, None, locked=True)))
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
                    self._threshold(q, k + 1, now, w, none, n, cls, None, approx=False, locked=True)
                best = min(best, tm.s)
            chk.ms["threshold"] = best * 1e3 / len(q)
        P.calibration_s += time.perf_counter() - t0
        return chk

    def _threshold(self, q: np.ndarray, k: int, now: float, w: tuple[float, float, float], key: tuple,
                   n_match: int, cls: tuple, mkey: tuple | None, approx: bool | None, locked: bool = False,
                   allow_scan: bool = True):
        """Threshold search (metacog_fast/memory/threshold.py). ``approx``: None = HNSW cap where the
        class's probe check allows it, True = allowed (probe checks), False = exact completion only.
        Falls back to the exact scan when that is predicted cheaper (``allow_scan=False``: never, for
        tests of the search itself). ``locked``: caller holds ``_mutate``."""
        if not locked:
            with self._mutate:
                return self._threshold(q, k, now, w, key, n_match, cls, mkey, approx, True, allow_scan)
        P, c, t = self._planner, self.config, self._table
        cm = P.cost
        nq = len(q)
        owner = bk.ANY_AGENT if key[0] is None else key[0]
        t0, cal0 = time.perf_counter(), P.calibration_s
        head = self._lists.head(owner, max(c.head, k))  # k per level: tau is at least the k-th best head
        head = head[self._passes(head, key[1], key[2])]
        # An agent or kind filter leaves rows scattered over the table: their scan runs at the
        # scattered-row rate (measured 6-7x the contiguous one at 1M), not the whole-store rate.
        scattered = key[0] is not None or key[1] is not None
        scan_s = cm.cand_s(n_match, nq) if scattered else cm.scan_s(n_match, nq)
        ones = np.ones(nq)
        # HNSW seeds only without a filter (hnswlib's filter calls Python per visited node) and
        # where relevance counts; the cap from them only where the curve says HNSW finds the top-m.
        rungs = [c.seed_m, c.seed_m_wide] if (w[1] > 0 and key == (None, None, None) and approx is not False) else [0]
        best = None
        for m in rungs:
            hrows, rel_cap = np.empty((nq, 0), np.int64), None
            if m:
                curve = self._curve(m)
                # The cap needs a beam at which the curve reached its target, and one cheaper than the
                # scan; otherwise the default beam still gives good seeds (a higher tau), no cap.
                trusted = curve.ef is not None and curve.ms * 1e-3 * nq < scan_s
                if not trusted and m != rungs[0]:
                    break
                labels, dist = self._knn(q, m, curve.ef if trusted else max(c.ef, m), None)
                hrows = t.id_to_row[labels]
                if trusted:
                    rel_cap = (2.0 - dist[:, -1].astype(np.float64)) / 2.0  # (cos + 1) / 2, cos = 1 - dist
            seed = np.concatenate([hrows, np.broadcast_to(head, (nq, len(head)))], axis=1)
            top_rows, top_s = self._rerank(q, seed, k, now, w)
            tau = thr.thresholds(top_s, k)
            lm_x, n_x = thr.completion(self._lists, owner, tau, ones, now, w, c.decay, c.unit)
            opts = [("exact", lm_x, n_x, cm.cand_s(n_x, nq))]
            if rel_cap is not None:
                lm_a, n_a = thr.completion(self._lists, owner, tau, rel_cap, now, w, c.decay, c.unit)
                opts.append(("hnsw", lm_a, n_a, cm.cand_s(n_a, nq)))
            exact_opt = opts[0]
            pick = min(opts, key=lambda o: o[3])
            # Prefer the completion that is exact by construction unless it costs clearly more.
            spent = time.perf_counter() - t0 - (P.calibration_s - cal0)  # this call's search so far
            if pick[0] == "hnsw" and exact_opt[3] <= 2 * pick[3] + spent:
                pick = exact_opt
            if pick[0] == "hnsw" and approx is None and not self._hnsw_allowed(cls, k, now, w):
                pick = exact_opt
            best = (pick, top_rows, m)
            nxt = P.curves.get(c.seed_m_wide)
            wide_s = (nxt.ms * 1e-3 * nq) if (nxt is not None and nxt.ef is not None) else scan_s / 8
            if m == rungs[-1] or pick[3] <= wide_s:
                break
        if best is None:  # HNSW untrusted at the first rung: exact completion from the heads alone
            top_rows, top_s = self._rerank(q, head, k, now, w)
            tau = thr.thresholds(top_s, k)
            lm_x, n_x = thr.completion(self._lists, owner, tau, ones, now, w, c.decay, c.unit)
            best = (("exact", lm_x, n_x, cm.cand_s(n_x, nq)), top_rows, 0)
        (kind, lm, n_est, cost_s), top_rows, m = best
        # Factor 2: the model's per-row costs are measured on other row sets than this completion's.
        if allow_scan and 2 * cost_s >= scan_s:
            self.last_plan = {"path": "scan", "why": f"completion {n_est} rows predicted slower"}
            self.last_candidates = n_match
            if mkey is not None and P.calibration_s == cal0:
                P.lost(mkey)
            return self._scan(q, key, k, now, w)
        comp = thr.gather(self._lists, owner, lm)
        if key[1] is not None or key[2] is not None:
            keep = self._passes(comp.rows, key[1], key[2])
            comp = thr.Completion(comp.rows[keep], comp.mask[:, keep])
        cand = np.concatenate([top_rows, comp.padded()], axis=1)
        out = self._rerank(q, cand, k, now, w)
        if mkey is not None and P.calibration_s == cal0:  # calls that measured curves or checks do not count
            if time.perf_counter() - t0 > scan_s:
                P.lost(mkey)
            else:
                P.won(mkey)
        self.last_candidates = cand.shape[1]
        self.last_plan = {"path": "threshold", "cap": "1" if kind == "exact" else f"hnsw m={m}",
                          "candidates": int(cand.shape[1])}
        return out

    def _hnsw_allowed(self, cls: tuple, k: int, now: float, w: tuple[float, float, float]) -> bool:
        """Whether the probe check of this weight class allows the HNSW-capped completion."""
        chk = self._class_check(cls, k, now, w)
        return self._planner.passes(chk, "threshold_hnsw")

    def _hot_path(self, q: np.ndarray, k: int, now: float, w: tuple[float, float, float], key: tuple,
                  filt: Callable[[int], bool] | None, locked: bool = False):
        """HNSW (narrow beam) + hot-set candidates, exact rerank (docs/memory.md, "hot")."""
        c, t = self.config, self._table
        kp = max(k, c.hot_main_k)
        labels, _ = self._knn(q, kp, max(c.hot_main_ef, kp), filt)
        if locked:
            return self._hot_rerank(q, labels, k, now, w, key, filt)
        with self._mutate:
            return self._hot_rerank(q, labels, k, now, w, key, filt)

    def _knn(self, q: np.ndarray, k: int, ef: int, filt: Callable[[int], bool] | None):
        """(labels [Q, k] int64, distances [Q, k]) of the main index at beam ``ef``. hnswlib keeps one
        ef per index, so setting it and querying are one step under a lock: another thread's beam
        must not leak into this query (the HNSW cap is only valid at the measured beam)."""
        with self._hnsw_lock:
            self._index.set_ef(ef)
            try:
                return hx.labels_distances(self._index, q, k, filt)
            finally:
                self._index.set_ef(self.config.ef)

    def _hot_rerank(self, q, labels, k, now, w, key, filt):
        hrows = self._table.id_to_row[labels]
        cand = np.concatenate([hrows, self._hot_candidates(q, key, filt, now)], axis=1)
        self.last_candidates = cand.shape[1]
        return self._rerank(q, cand, k, now, w)

    # ---------------------------------------------------------------- forced paths ("hot", "bound")
    def _legacy(self, q: np.ndarray, k: int, now: float, w: tuple[float, float, float], key: tuple):
        t, c = self._table, self.config
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
        with self._mutate:
            n_match, match_rows, filt = self._filter(key, need_rows=False)
            limit = c.exact_below if key == (None, None, None) else max(c.exact_below, c.exact_filtered_below)
            if n_match <= max(limit, kp):
                return self._scan(q, key, k, now, w)
        # Fast path. 1) HNSW candidates on relevance, under the filter.
        try:
            labels, dist = self._knn(q, kp, ef, filt)
        except RuntimeError:  # hnswlib found fewer than kp under a selective filter
            with self._mutate:
                return self._scan(q, key, k, now, w)
        with self._mutate:
            hrows = t.id_to_row[labels]  # [Q, kp]; -1 if forgotten meanwhile (HNSW labels are ids < len)
            if c.fast_path == "hot":
                cand = np.concatenate([hrows, self._hot_candidates(q, key, filt, now)], axis=1)
                self.last_candidates = cand.shape[1]
                return self._rerank(q, cand, k, now, w)
            rel_bound = (1.0 - dist[:, -1].astype(np.float64) + 1.0) / 2.0  # relevance of the kp-th
            # 2) seed the threshold with HNSW + the most recent records of each importance bucket.
            owner = bk.ANY_AGENT if a_code is None else a_code
            head = self._lists.head(owner, c.head)
            head = head[self._passes(head, k_code, since)]
            seed = np.concatenate([hrows, np.tile(head, (len(q), 1))], axis=1)
            s = self._scores(q, seed, now, w)
            kk = min(k, s.shape[1])
            tau = -np.partition(-s, kk - 1, axis=1)[:, kk - 1].astype(np.float64)
            # 3) every record of a bucket that could still beat tau (a recency-list suffix).
            la_min = bk.la_min(tau, rel_bound, self._lists.hi, now, w, c.decay, c.unit)
            urows, umask = self._lists.suffixes(owner, la_min)
            keep = self._passes(urows, k_code, since)
            urows, umask = urows[keep], umask[:, keep]
            cand = np.concatenate([hrows, thr.ragged_pad(urows, umask)], axis=1)
            self.last_candidates = cand.shape[1]
            return self._rerank(q, cand, k, now, w)

    def _hot_candidates(self, q: np.ndarray, key: tuple, filt: Callable[[int], bool] | None,
                        now: float) -> np.ndarray:
        """Hot-set candidates [Q, C] (-1 padded) under the filter ``key``; call under ``_mutate``."""
        hot, c = self._hot, self.config
        if hot.needs_rebuild(now):
            hot.rebuild(now)
        if key == (None, None, None):
            n_hot, rows = hot.size, None
        else:
            rows = self._hot_filtered(key)
            n_hot = len(rows)
        if n_hot <= c.hot_scan_max:
            if rows is None:
                rows = hot.rows()
            return np.broadcast_to(rows, (len(q), len(rows)))
        near = hot.knn_rows(q, c.hot_k, filt)
        if near is None:  # hnswlib could not fill k under the filter: take them all
            rows = hot.rows() if rows is None else rows
            return np.broadcast_to(rows, (len(q), len(rows)))
        shared = self._hot_shared(key)
        return np.concatenate([near, np.broadcast_to(shared, (len(q), len(shared)))], axis=1)

    def _hot_shared(self, key: tuple) -> np.ndarray:
        """Query-independent hot candidates under the filter: the ``hot_top`` of highest static
        score and the pending (not yet indexed) members [C] (cached per hot-set version)."""
        hot, c = self._hot, self.config
        ck = ("shared", c.hot_top) + key
        hit = self._mask_cache.get(ck)
        if hit is not None and hit[0] == (self._gen, hot.version):
            return hit[2]
        pend = hot.pending_rows()
        if key == (None, None, None):
            top = hot.top_static(c.hot_top)
        else:
            top = hot.by_static
            top = top[hot.member[top]]
            top = top[self._passes_key(top, key)][: c.hot_top]
            pend = pend[self._passes_key(pend, key)]
        rows = np.concatenate([top, pend])
        if len(self._mask_cache) > 64:
            self._mask_cache.clear()
        self._mask_cache[ck] = ((self._gen, hot.version), len(rows), rows, None)
        return rows

    def _hot_filtered(self, key: tuple) -> np.ndarray:
        """Hot rows [S'] passing the filter ``key`` (cached per hot-set version and filter)."""
        hot = self._hot
        ck = ("hot",) + key
        hit = self._mask_cache.get(ck)
        if hit is not None and hit[0] == (self._gen, hot.version):
            return hit[2]
        rows = hot.rows()
        rows = rows[self._passes_key(rows, key)]
        if len(self._mask_cache) > 64:
            self._mask_cache.clear()
        self._mask_cache[ck] = ((self._gen, hot.version), len(rows), rows, None)
        return rows

    def _rerank(self, q: np.ndarray, cand: np.ndarray, k: int, now: float, w: tuple[float, float, float]):
        t, c = self._table, self.config
        return memory_ops.memory_rerank(q, t.keys, t.last_access, t.importance, cand, k, now, w, c.decay, c.unit,
                                        backend=self._backend, check=False)

    def _scores(self, q: np.ndarray, cand: np.ndarray, now: float, w: tuple[float, float, float]) -> np.ndarray:
        t, c = self._table, self.config
        return memory_ops.memory_scores(q, t.keys, t.last_access, t.importance, cand, now, w, c.decay, c.unit,
                                        backend=self._backend, check=False)

    def _passes(self, rows: np.ndarray, k_code: int | None, since: float | None) -> np.ndarray:
        t = self._table
        ok = np.ones(len(rows), bool)
        if k_code is not None:
            ok &= t.kind[rows] == k_code
        if since is not None:
            ok &= t.created[rows] >= since
        return ok

    def _passes_key(self, rows: np.ndarray, key: tuple) -> np.ndarray:
        """[N] bool: ``rows`` that pass the whole filter ``key`` = (agent code, kind code, since)."""
        ok = self._passes(rows, key[1], key[2])
        if key[0] is not None:
            ok &= self._table.agent[rows] == key[0]
        return ok

    def _filter(self, key: tuple, need_rows: bool) -> tuple[int, np.ndarray | None, Callable[[int], bool] | None]:
        """(live records passing the filter, their rows or None, hnswlib filter or None)."""
        t = self._table
        if key == (None, None, None):
            return t.live, None, None
        hit = self._mask_cache.get(key)
        if hit is not None and hit[0] == self._gen:
            return hit[1], hit[2], hit[3]
        rows = t.filter_rows(*key)
        allowed = np.zeros(t.id_to_row.shape[0], np.bool_)
        allowed[t.row_id[rows]] = True
        filt = allowed.tobytes().__getitem__  # label -> 0/1, a cheap call from hnswlib's C++
        if len(self._mask_cache) > 64:
            self._mask_cache.clear()
        self._mask_cache[key] = (self._gen, len(rows), rows, filt)
        return len(rows), rows, filt

    def _finish(self, rows: np.ndarray, scores: np.ndarray, now: float,
                touch: bool) -> list[tuple[np.ndarray, np.ndarray]]:
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
                for i in t.row_id[u].tolist():
                    self._pending_access[i] = now
                if len(self._pending_access) >= self.config.access_flush_every:
                    self._flush_access()
        return out

    # ---------------------------------------------------------------- persistence
    def _take_pending(self) -> list[tuple[float, int]]:
        p = [(v, i) for i, v in self._pending_access.items()]
        self._pending_access.clear()
        return p

    def _flush_access(self) -> None:
        if self._pending_access:
            self._db.write_access(self._take_pending())

    def _save_index(self) -> None:
        seq, _ = self._db.seq()
        ids = self._table.row_id[: self._table.end]
        max_id = int(ids.max()) if len(ids) else 0
        hx.save(self._index, self.index_path, seq, max_id, self._params())
        self._index_seq = seq
        self._added_since_save = 0

    def flush(self) -> None:
        """Write pending last_access updates and save the index (atomically) if it changed."""
        self._check_open()
        with self._lock.write():
            with self._mutate:
                self._flush_access()
            if self._index_seq != self._db.seq()[0]:
                self._save_index()

    def backup(self, path: str | os.PathLike) -> int:
        """Copy the records to a new SQLite file at ``path`` (SQLite's online backup API), while
        other threads may go on adding and retrieving; returns the number of records copied.

        The copy is one consistent snapshot: every add acknowledged before the call is in it,
        adds running during it are either wholly in it or not. Pending ``last_access`` updates
        are written first. The index is not copied (it is derived): opening the copy with
        :meth:`open` rebuilds it. The copy is written to a temp file and renamed into place.
        """
        self._check_open()
        target = os.fspath(path)
        if not target:
            raise ValueError("path: expected a file path for the backup")
        if os.path.abspath(target) == os.path.abspath(self.path):
            raise ValueError(f"path: {target} is the store's own file; give another path")
        parent = os.path.dirname(os.path.abspath(target))
        if not os.path.isdir(parent):
            raise FileNotFoundError(f"path: folder {parent} does not exist")
        with self._mutate:
            self._flush_access()
        return self._db.backup(target)

    def close(self) -> None:
        """Flush and close; the store cannot be used afterwards."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._db.close()

    def __enter__(self) -> "MemoryStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("MemoryStore is closed")

    def _live_rows(self, ids: np.ndarray) -> np.ndarray:
        rows = self._table.rows_of(ids)
        if (rows < 0).any():
            raise KeyError(f"ids: not live records: {ids[rows < 0][:10].tolist()}")
        return rows

    def stats(self) -> dict[str, Any]:
        """Counts and sizes (for monitoring and benchmarks)."""
        return {"records": len(self), "index_elements": self._index.element_count,
                "index_capacity": self._index.max_elements, "agents": len(self._table.agents.names)}


# -------------------------------------------------------------------- input checks
def _matrix(x: Any, dim: int, name: str) -> np.ndarray:
    """x (numpy-like or a torch tensor) [N, dim] or [dim] -> a numeric array [N, dim]."""
    torch = sys.modules.get("torch")  # a tensor can only come from an imported torch
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().numpy()
    a = np.asarray(x)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name}: expected a float array [N, {dim}], got dtype {a.dtype}")
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"{name}: expected shape [N, {dim}], got {list(np.shape(x))}")
    return a


def _unit_queries(x: Any, dim: int, name: str) -> np.ndarray:
    """Queries [Q, dim] (or [dim]) -> L2-normalised float32 [Q, dim]; one pass checks NaN/inf/zero
    (the float64 squared norm is NaN or inf iff an element is, 0 iff the vector is)."""
    a = _matrix(x, dim, name)
    sq = np.einsum("ij,ij->i", a, a, dtype=np.float64)
    if not (np.isfinite(sq).all() and sq.all()):
        a = _embeddings(a, dim, name)  # raises the precise error, else the squares overflowed
        return _normalise(a / np.abs(a).max(axis=1, keepdims=True))
    return (a / np.sqrt(sq)[:, None]).astype(np.float32)


def _embeddings(x: Any, dim: int, name: str) -> np.ndarray:
    a = np.ascontiguousarray(_matrix(x, dim, name), np.float32)
    if not np.isfinite(a).all():
        raise ValueError(f"{name}: contains NaN or inf")
    if (np.abs(a).max(axis=1) == 0).any():
        raise ValueError(f"{name}: a zero vector has no direction (cosine undefined)")
    return a


def _normalise(a: np.ndarray) -> np.ndarray:
    norm = np.sqrt(np.einsum("ij,ij->i", a, a, dtype=np.float64))
    return (a / norm[:, None]).astype(np.float32)


def _broadcast_num(x: Any, n: int, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64) if not isinstance(x, str) else None
    if a is None:
        raise TypeError(f"{name}: expected a number or {n} numbers, got a string")
    if a.ndim == 0:
        return np.full(n, float(a))
    if a.shape != (n,):
        raise ValueError(f"{name}: expected a scalar or shape [{n}], got {list(a.shape)}")
    return a


def _importance(a: np.ndarray, name: str) -> np.ndarray:
    if not np.isfinite(a).all() or (a < 1).any() or (a > 10).any():
        bad = a[~(np.isfinite(a) & (a >= 1) & (a <= 10))][:5].tolist()
        raise ValueError(f"{name}: importance must lie in [1, 10], got {bad}")
    return a.astype(np.float32)


def _broadcast_str(x: Any, n: int, name: str, required: bool = False) -> list:
    if x is None:
        if required:
            raise ValueError(f"{name}: required (a string or {n} strings)")
        return [None] * n
    if isinstance(x, str):
        if required and not x:
            raise ValueError(f"{name}: expected a non-empty string")
        return [x] * n
    vals = list(x)
    if len(vals) != n:
        raise ValueError(f"{name}: expected a string or {n} strings, got {len(vals)}")
    for v in vals:
        if not (isinstance(v, str) or (v is None and not required)) or (required and not v):
            raise ValueError(f"{name}: expected strings, got {v!r}")
    return vals


def _broadcast_obj(x: Any, n: int, name: str) -> list:
    if x is None or isinstance(x, dict):
        return [x] * n
    vals = list(x)
    if len(vals) != n:
        raise ValueError(f"{name}: expected a dict or {n} dicts, got {len(vals)}")
    return vals


def _ids(x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim == 0:
        a = a[None]
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise ValueError(f"ids: expected a 1-d array of integer ids, got {a.dtype} {list(a.shape)}")
    return a.astype(np.int64)
