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
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Sequence

import numpy as np

from metacog_fast.ops.memory import api as memory_ops
from metacog_fast.memory import buckets as bk
from metacog_fast.memory.hot import HotSet
from metacog_fast.memory import index as hx
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
        key = (a_code, k_code, None if since is None else float(since))
        with self._mutate:
            n_match, match_rows, filt = self._filter(key, need_rows=exact)
            limit = c.exact_below if key == (None, None, None) else max(c.exact_below, c.exact_filtered_below)
            if exact or n_match <= max(limit, kp):
                if match_rows is None:
                    match_rows = t.filter_rows(*key)
                return self._rerank(q, match_rows, k, now, w)
        # Fast path. 1) HNSW candidates on relevance, under the filter.
        self._index.set_ef(ef)
        try:
            labels, dist = hx.labels_distances(self._index, q, kp, filt)
        except RuntimeError:  # hnswlib found fewer than kp under a selective filter
            with self._mutate:
                rows = t.filter_rows(*key)
                return self._rerank(q, rows, k, now, w)
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
            cand = np.concatenate([hrows, _ragged_pad(urows, umask)], axis=1)
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


def _ragged_pad(rows: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """rows [U] with a per-query selection mask [Q, U] -> [Q, max count] padded with -1."""
    Q = mask.shape[0]
    if rows.size == 0:
        return np.empty((Q, 0), np.int64)
    counts = mask.sum(axis=1)
    m = int(counts.max())
    order = np.argsort(~mask, axis=1, kind="stable")[:, :m]
    out = rows[order]
    out[np.arange(m)[None, :] >= counts[:, None]] = -1
    return out
