"""In-memory columns of the live records, in flat numpy arrays that the compiled
rerank reads directly (rows, not ids: a forgotten record's row is reused).

Columns (``R`` = capacity in rows): keys [R, D] float32 (L2-normalised
embeddings), their int8 codes [R, D] with per-row scale [R] float32 and residual norm
|key - scale * codes| [R] float32 (the bounded scan reads these first), last_access [R] float64, created [R] float64, importance [R]
float32, bucket [R] int8 (importance bucket, -1 = free row), agent [R] int32 and kind [R] int32 (codes of the strings), row_id [R]
int64 (-1 = free row), plus id_to_row [max id + 1] int64 (-1 = absent).
"""
from __future__ import annotations

import numpy as np


def quantize(keys: np.ndarray, chunk: int = 65536) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """keys [N, D] float32 -> (codes [N, D] int8, scale [N] float32, err [N] float32) with
    key ~ scale * codes and err >= |key - scale * codes| (float64 residual, rounded up)."""
    n, d = keys.shape
    codes = np.empty((n, d), np.int8)
    scale = np.empty(n, np.float32)
    err = np.empty(n, np.float32)
    for s in range(0, n, chunk):
        k = keys[s: s + chunk].astype(np.float64)
        m = np.abs(k).max(axis=1)
        sc = np.where(m > 0, m / 127.0, 1.0).astype(np.float32)
        c = np.clip(np.rint(k / sc[:, None]), -127, 127).astype(np.int8)
        res = k - sc.astype(np.float64)[:, None] * c
        codes[s: s + chunk], scale[s: s + chunk] = c, sc
        err[s: s + chunk] = np.nextafter(np.sqrt((res * res).sum(axis=1)).astype(np.float32), np.float32(np.inf))
    return codes, scale, err


class Codes:
    """String <-> small int codes for agents and kinds."""

    def __init__(self) -> None:
        self.code: dict[str, int] = {}
        self.names: list[str] = []

    def get(self, name: str) -> int:
        c = self.code.get(name)
        if c is None:
            c = self.code[name] = len(self.names)
            self.names.append(name)
        return c

    def find(self, name: str) -> int:
        """Code of ``name``, or -1 if never seen."""
        return self.code.get(name, -1)


class Table:
    """Columnar copy of the live records (SQLite stays the source of truth)."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        self.dim = dim
        cap = max(capacity, 16)
        self.keys = np.zeros((cap, dim), np.float32)
        self.codes = np.zeros((cap, dim), np.int8)
        self.qscale = np.zeros(cap, np.float32)
        self.qerr = np.zeros(cap, np.float32)
        self.last_access = np.zeros(cap, np.float64)
        self.created = np.zeros(cap, np.float64)
        self.importance = np.ones(cap, np.float32)
        self.bucket = np.full(cap, -1, np.int8)
        self.agent = np.full(cap, -1, np.int32)
        self.kind = np.full(cap, -1, np.int32)
        self.row_id = np.full(cap, -1, np.int64)
        self.id_to_row = np.full(1024, -1, np.int64)
        self.agents = Codes()
        self.kinds = Codes()
        self._free: list[int] = []
        self._end = 0  # rows [0, _end) have been used at least once
        self.live = 0

    @property
    def end(self) -> int:
        """Rows in use or freed; every live row is below it."""
        return self._end

    def _grow_rows(self, need: int) -> None:
        cap = self.keys.shape[0]
        if need <= cap:
            return
        new = max(need, cap * 2)
        for name in ("keys", "codes", "qscale", "qerr", "last_access", "created", "importance", "bucket", "agent",
                     "kind", "row_id"):
            old = getattr(self, name)
            fill = -1 if name in ("agent", "kind", "row_id", "bucket") else (1 if name == "importance" else 0)
            arr = np.full((new,) + old.shape[1:], fill, old.dtype)
            arr[:cap] = old
            setattr(self, name, arr)

    def _grow_ids(self, max_id: int) -> None:
        n = self.id_to_row.shape[0]
        if max_id < n:
            return
        arr = np.full(max(max_id + 1, 2 * n), -1, np.int64)
        arr[:n] = self.id_to_row
        self.id_to_row = arr

    def insert(self, ids: np.ndarray, keys: np.ndarray, created: np.ndarray, last_access: np.ndarray,
               importance: np.ndarray, agent_codes: np.ndarray, kind_codes: np.ndarray) -> np.ndarray:
        """Place records in free rows (reused first); returns their rows [N]."""
        n = len(ids)
        reuse = [self._free.pop() for _ in range(min(n, len(self._free)))]
        fresh = n - len(reuse)
        rows = np.empty(n, np.int64)
        rows[: len(reuse)] = reuse
        rows[len(reuse):] = np.arange(self._end, self._end + fresh)
        self._grow_rows(self._end + fresh)
        self._end += fresh
        self._grow_ids(int(ids.max()) if n else 0)
        self.keys[rows] = keys
        self.codes[rows], self.qscale[rows], self.qerr[rows] = quantize(keys)
        self.created[rows] = created
        self.last_access[rows] = last_access
        self.set_importance(rows, importance)
        self.agent[rows] = agent_codes
        self.kind[rows] = kind_codes
        self.row_id[rows] = ids
        self.id_to_row[ids] = rows
        self.live += n
        return rows

    def set_importance(self, rows: np.ndarray, importance: np.ndarray) -> None:
        self.importance[rows] = importance
        self.bucket[rows] = np.clip(np.floor(importance), 1, 10).astype(np.int8) - 1

    def rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids`` (-1 where an id is not live)."""
        ids = np.asarray(ids, np.int64)
        out = np.full(ids.shape, -1, np.int64)
        ok = (ids >= 0) & (ids < self.id_to_row.shape[0])
        out[ok] = self.id_to_row[ids[ok]]
        return out

    def remove(self, ids: np.ndarray) -> np.ndarray:
        """Free the rows of live ``ids``; returns those rows."""
        rows = self.rows_of(ids)
        rows = rows[rows >= 0]
        self.id_to_row[self.row_id[rows]] = -1
        self.row_id[rows] = -1
        self.bucket[rows] = -1
        self.agent[rows] = -1
        self.kind[rows] = -1
        self._free.extend(rows.tolist())
        self.live -= len(rows)
        return rows

    def filter_rows(self, agent: int | None, kind: int | None, since: float | None) -> np.ndarray:
        """Live rows passing the filter (codes; ``None`` = any), ascending."""
        end = self._end
        mask = self.row_id[:end] >= 0
        if agent is not None:
            mask &= self.agent[:end] == agent
        if kind is not None:
            mask &= self.kind[:end] == kind
        if since is not None:
            mask &= self.created[:end] >= since
        return np.flatnonzero(mask).astype(np.int64)
