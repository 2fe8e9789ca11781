"""Records between SQLite and the store: :class:`MemoryRecord` (what :meth:`MemoryStore.get`
returns) and the load of SQLite rows into the in-memory columns on open."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from metacog_fast.memory import buckets as bk
from metacog_fast.memory.checks import normalise
from metacog_fast.memory.table import Table


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


def record_of(r: tuple) -> MemoryRecord:
    """A :class:`MemoryRecord` from one row of ``Database.fetch`` (id, agent, kind, text, location,
    created, last_access, importance, embedding bytes, meta JSON)."""
    return MemoryRecord(
        id=r[0], agent=r[1], kind=r[2], text=r[3], location=r[4], created=r[5], last_access=r[6],
        importance=r[7], embedding=np.frombuffer(r[8], np.float32).copy(),
        meta=json.loads(r[9]) if r[9] is not None else None)


def ingest(table: Table, lists: bk.BucketLists, rows: list[tuple], dim: int) -> None:
    """Append a batch of ``Database.scan`` rows (id, agent, kind, created, last_access, importance,
    embedding bytes) to the columns and the recency lists."""
    t = table
    ids = np.fromiter((r[0] for r in rows), np.int64, len(rows))
    emb = np.frombuffer(b"".join(r[6] for r in rows), np.float32).reshape(len(rows), dim)
    keys = normalise(emb)
    rws = t.insert(
        ids, keys,
        np.fromiter((r[3] for r in rows), np.float64, len(rows)),
        np.fromiter((r[4] for r in rows), np.float64, len(rows)),
        np.fromiter((r[5] for r in rows), np.float32, len(rows)),
        np.fromiter((t.agents.get(r[1]) for r in rows), np.int32, len(rows)),
        np.fromiter((t.kinds.get(r[2]) for r in rows), np.int32, len(rows)),
    )
    lists.push(rws)
