"""Recency lists per importance bucket: the "most recent and most important"
candidates of the fast retrieval path.

Records are grouped by importance bucket ``b = floor(importance) - 1`` (0..9) and,
separately, by (agent, bucket). Each group keeps an append-only list of
(last_access, row) sorted by last_access. Since recency only falls with age, the
records of a bucket that can still reach a score threshold ``tau`` are exactly a
suffix of its list:

    w_rec * decay**((now - la)/unit) + w_imp * hi_b/10 + w_rel * rel_bound >= tau
    <=>  la >= la_min(b)        (closed form, see ``la_min``)

where ``hi_b`` is the largest importance ever put in bucket b and ``rel_bound``
the relevance no record outside the HNSW candidates can exceed. When a record's
last_access or importance changes, a new entry is appended and the old one goes
stale (checked against the table on read, dropped on compaction).
"""
from __future__ import annotations

import numpy as np

from metacog_fast.memory.table import Table

N_BUCKETS = 10
ANY_AGENT = -1


def bucket_of(importance: np.ndarray) -> np.ndarray:
    """Importance [N] in [1, 10] -> bucket [N] in 0..9."""
    return np.clip(np.floor(importance).astype(np.int64) - 1, 0, N_BUCKETS - 1)


class _List:
    __slots__ = ("la", "rows", "n", "sorted", "n_compacted")

    def __init__(self) -> None:
        self.la = np.empty(64, np.float64)
        self.rows = np.empty(64, np.int64)
        self.n = 0
        self.sorted = True
        self.n_compacted = 0

    def append(self, la: np.ndarray, rows: np.ndarray) -> None:
        m = len(rows)
        if m == 0:
            return
        need = self.n + m
        if need > len(self.rows):
            cap = max(need, 2 * len(self.rows))
            for name in ("la", "rows"):
                old = getattr(self, name)
                new = np.empty(cap, old.dtype)
                new[: self.n] = old[: self.n]
                setattr(self, name, new)
        if self.sorted:
            prev = self.la[self.n - 1] if self.n else -np.inf
            if la[0] < prev or (m > 1 and np.any(la[1:] < la[:-1])):
                self.sorted = False
        self.la[self.n: need] = la
        self.rows[self.n: need] = rows
        self.n = need


class BucketLists:
    """Recency-sorted lists per (agent code or ANY_AGENT, importance bucket)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.lists: dict[tuple[int, int], _List] = {}
        self.hi = np.zeros(N_BUCKETS, np.float64)  # largest importance seen per bucket
        self.version = 0  # bumped by every push: keys the head cache
        self._heads: dict[tuple[int, int], tuple[int, np.ndarray]] = {}

    def push(self, rows: np.ndarray) -> None:
        """Record the current (last_access, bucket, agent) of ``rows``."""
        if len(rows) == 0:
            return
        self.version += 1
        t = self.table
        b = t.bucket[rows].astype(np.int64)
        np.maximum.at(self.hi, b, t.importance[rows].astype(np.float64))
        la = t.last_access[rows]
        ag = t.agent[rows].astype(np.int64)
        key = b * (1 << 32) + (ag + 1)
        order = np.argsort(key, kind="stable")
        ks = key[order]
        starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
        ends = np.r_[starts[1:], len(ks)]
        for s, e in zip(starts, ends):
            idx = order[s:e]
            bb = int(b[idx[0]])
            a = int(ag[idx[0]])
            for owner in (a, ANY_AGENT):
                lst = self.lists.get((owner, bb))
                if lst is None:
                    lst = self.lists[(owner, bb)] = _List()
                lst.append(la[idx], rows[idx])

    def _valid(self, owner: int, bucket: np.ndarray | int, la: np.ndarray, rows: np.ndarray) -> np.ndarray:
        # A forgotten row has bucket -1; a changed last_access or importance left a newer entry.
        t = self.table
        ok = (t.last_access[rows] == la) & (t.bucket[rows] == bucket)
        if owner != ANY_AGENT:
            ok &= t.agent[rows] == owner
        return ok

    def _ready(self, owner: int, b: int) -> _List | None:
        lst = self.lists.get((owner, b))
        if lst is None or lst.n == 0:
            return None
        if not lst.sorted or lst.n > 2 * lst.n_compacted + 4096:
            la, rows = lst.la[: lst.n], lst.rows[: lst.n]
            keep = self._valid(owner, b, la, rows)
            la, rows = la[keep], rows[keep]
            order = np.argsort(la, kind="stable")
            m = len(order)
            lst.la[:m] = la[order]
            lst.rows[:m] = rows[order]
            lst.n = lst.n_compacted = m
            lst.sorted = True
        return lst

    def _gather(self, owner: int, lo_of) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Concatenate the tails lst[lo_of(b, lst):] of every bucket; returns valid (la, rows, bucket)."""
        las, rws, nb = [], [], np.zeros(N_BUCKETS, np.int64)
        for b in range(N_BUCKETS):
            lst = self._ready(owner, b)
            if lst is None:
                continue
            lo = lo_of(b, lst)
            if lo >= lst.n:
                continue
            las.append(lst.la[lo: lst.n])
            rws.append(lst.rows[lo: lst.n])
            nb[b] = lst.n - lo
        if not rws:
            e = np.empty(0, np.int64)
            return e.astype(np.float64), e, e.astype(np.int8)
        la, rows = np.concatenate(las), np.concatenate(rws)
        bucket = np.repeat(np.arange(N_BUCKETS, dtype=np.int8), nb)
        ok = self._valid(owner, bucket, la, rows)
        return la[ok], rows[ok], bucket[ok]

    def head(self, owner: int, m: int) -> np.ndarray:
        """The most recent valid rows of every bucket of ``owner`` (about ``m`` per bucket)."""
        hit = self._heads.get((owner, m))
        if hit is not None and hit[0] == self.version:
            return hit[1]
        rows = self._gather(owner, lambda b, lst: max(0, lst.n - m))[1]
        if len(self._heads) > 256:
            self._heads.clear()
        self._heads[(owner, m)] = (self.version, rows)
        return rows

    def suffixes(self, owner: int, la_min: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Union over buckets of the valid entries with la >= min over queries of
        ``la_min`` [Q, N_BUCKETS]; returns (rows [U], per-query test la >= la_min[q, bucket]
        as a bool mask [Q, U])."""
        lo_all = la_min.min(axis=0)
        la, rows, bucket = self._gather(
            owner, lambda b, lst: int(lst.la[: lst.n].searchsorted(lo_all[b], side="left")))
        return rows, la[None, :] >= la_min[:, bucket.astype(np.int64)]


def la_min(tau: np.ndarray, rel_bound: np.ndarray, hi: np.ndarray, now: float,
           weights: tuple[float, float, float], decay: float, unit: float) -> np.ndarray:
    """Smallest last_access [Q, N_BUCKETS] at which a record of bucket b could still
    reach ``tau`` [Q] given ``rel_bound`` [Q] (see module docstring)."""
    w_rec, w_rel, w_imp = weights
    need = tau[:, None] - w_imp * hi[None, :] / 10.0 - w_rel * rel_bound[:, None]  # recency part needed
    need = need - 1e-6  # float32 scores: never cut a record that ties the threshold
    out = np.empty_like(need)
    if w_rec == 0.0 or decay == 1.0:
        have = w_rec  # recency is constant: w_rec * 1
        out[:] = np.where(need <= have, -np.inf, np.inf)
        return out
    x = need / w_rec
    with np.errstate(divide="ignore", invalid="ignore"):
        la = now - unit * np.log(np.maximum(x, 1e-300)) / np.log(decay)
    out[:] = np.where(x <= 0, -np.inf, la)
    out[~np.isfinite(tau)] = -np.inf  # no threshold known: take everything
    return out
