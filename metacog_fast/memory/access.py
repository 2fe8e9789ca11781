"""``last_access`` updates waiting for SQLite: retrieval touches records in memory at once and
writes the new times in batches (every ``access_flush_every`` touches, and on add, get, flush,
backup and close), so a retrieve does not pay a SQLite write."""
from __future__ import annotations

from typing import Iterable


class PendingAccess:
    """Record id -> last_access time not yet written; call under the store's ``_mutate`` lock."""

    def __init__(self) -> None:
        self.times: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.times)

    def touch(self, ids: Iterable[int], now: float) -> None:
        for i in ids:
            self.times[i] = now

    def drop(self, ids: Iterable[int]) -> None:
        """Forget the pending times of deleted records."""
        for i in ids:
            self.times.pop(i, None)

    def take(self) -> list[tuple[float, int]]:
        """The pending (time, id) pairs, now no longer pending."""
        p = [(v, i) for i, v in self.times.items()]
        self.times.clear()
        return p
