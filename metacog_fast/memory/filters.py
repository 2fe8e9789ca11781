"""Retrieval filters of the store: which live rows pass a filter key (agent code, kind code, since)
and the hnswlib filter function for it, cached per store generation (every add and forget bumps it).

A key is ``(agent code | None, kind code | None, since | None)``; ``(None, None, None)`` passes
every live record.
"""
from __future__ import annotations

from typing import Any, Callable, Hashable

import numpy as np

from metacog_fast.memory.table import Table

NO_FILTER = (None, None, None)
_MAX_ENTRIES = 64


class FilterCache:
    """Rows and hnswlib filters per key over ``table``; call under the store's ``_mutate`` lock."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.gen = 0
        """Bumped by every add/forget: invalidates the cached rows."""
        self.cache: dict[Hashable, tuple[Any, int, np.ndarray, Callable[[int], bool] | None]] = {}

    def bump(self) -> None:
        self.gen += 1

    def _put(self, ck: Hashable, entry: tuple) -> None:
        if len(self.cache) > _MAX_ENTRIES:
            self.cache.clear()
        self.cache[ck] = entry

    def filter(self, key: tuple, need_rows: bool) -> tuple[int, np.ndarray | None, Callable[[int], bool] | None]:
        """(live records passing the filter, their rows or None, hnswlib filter or None)."""
        t = self.table
        if key == NO_FILTER:
            return t.live, None, None
        hit = self.cache.get(key)
        if hit is not None and hit[0] == self.gen:
            return hit[1], hit[2], hit[3]
        rows = t.filter_rows(*key)
        allowed = np.zeros(t.id_to_row.shape[0], np.bool_)
        allowed[t.row_id[rows]] = True
        filt = allowed.tobytes().__getitem__  # label -> 0/1, a cheap call from hnswlib's C++
        self._put(key, (self.gen, len(rows), rows, filt))
        return len(rows), rows, filt

    def all_rows(self, key: tuple) -> np.ndarray:
        """Live rows passing ``key`` [M], ascending (cached per store generation)."""
        if key != NO_FILTER:
            rows = self.filter(key, need_rows=True)[1]
            return rows if rows is not None else self.table.filter_rows(*key)
        hit = self.cache.get("all")
        if hit is not None and hit[0] == self.gen:
            return hit[2]
        rows = self.table.filter_rows(None, None, None)
        self.cache["all"] = (self.gen, len(rows), rows, None)
        return rows

    def passes(self, rows: np.ndarray, k_code: int | None, since: float | None) -> np.ndarray:
        """[N] bool: ``rows`` of kind ``k_code`` created at or after ``since`` (None: any)."""
        t = self.table
        ok = np.ones(len(rows), bool)
        if k_code is not None:
            ok &= t.kind[rows] == k_code
        if since is not None:
            ok &= t.created[rows] >= since
        return ok

    def passes_key(self, rows: np.ndarray, key: tuple) -> np.ndarray:
        """[N] bool: ``rows`` that pass the whole filter ``key`` = (agent code, kind code, since)."""
        ok = self.passes(rows, key[1], key[2])
        if key[0] is not None:
            ok &= self.table.agent[rows] == key[0]
        return ok

    def memo(self, ck: tuple, version: int, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """Rows [S] computed by ``compute`` for cache key ``ck``, reused while the store generation
        and ``version`` (of the set they were drawn from, e.g. the hot set) stay the same."""
        hit = self.cache.get(ck)
        if hit is not None and hit[0] == (self.gen, version):
            return hit[2]
        rows = compute()
        self._put(ck, ((self.gen, version), len(rows), rows, None))
        return rows
