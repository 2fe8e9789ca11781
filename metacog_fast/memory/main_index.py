"""The main HNSW index of the store and its lifecycle: loaded on open when its sidecar matches the
database (seq, parameters, size, structure, checksum), caught up with records added after its save,
else rebuilt from the columns; an index ahead of the database is an error
(:class:`~metacog_fast.memory.index.StaleDatabaseError`), never rebuilt over; saved (atomically,
with the database seq it reflects) when it fell behind; queried at a given beam under its own lock
(hnswlib keeps one ef per index).

The file operations are in :mod:`metacog_fast.memory.index`.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable

import hnswlib
import numpy as np

from metacog_fast.memory import index as hx
from metacog_fast.memory.config import MemoryConfig
from metacog_fast.memory.table import Table


class MainIndex:
    """hnswlib index over every live record (labels = record ids), at ``path`` (+ ``.json`` sidecar)."""

    def __init__(self, path: str, config: MemoryConfig) -> None:
        self.path = path
        self.config = config
        self.index: hnswlib.Index | None = None
        self.seq = -1
        """Database seq the saved file reflects (-1: the file is behind the index in memory)."""
        self.reflects = -1
        """Database seq the index in memory reflects: set on open, then by every add and forget."""
        self.added_since_save = 0
        self.lock = threading.Lock()  # hnswlib keeps one ef per index: set + query as one step

    def params(self) -> dict:
        c = self.config
        return {"dim": c.dim, "M": c.M, "ef_construction": c.ef_construction, "space": "cosine"}

    def threads(self) -> int:
        return self.config.num_threads if self.config.num_threads > 0 else -1

    def open(self, table: Table, seq: int, forget_seq: int, report: dict[str, Any], db_path: str) -> None:
        """Load the saved index if it matches the database (``seq``: its last write, ``forget_seq``:
        its last delete) and catch it up with later records, else rebuild it from ``table``; says
        which in ``report["index"]``. An index file whose sidecar records a seq past ``seq`` raises
        :class:`~metacog_fast.memory.index.StaleDatabaseError` (the database at ``db_path`` is older)."""
        t, c = table, self.config
        side, why = hx.read_sidecar(self.path)
        side_seq = hx.sidecar_seq(side)
        if side_seq is not None and side_seq > seq and os.path.exists(self.path):
            raise hx.StaleDatabaseError(db_path, self.path, f"the index reflects seq {side_seq}, the "
                                        f"database is at seq {seq}")
        idx = sc = None
        if side is not None:
            if side_seq is not None and side_seq < forget_seq:
                why = f"records were forgotten after the index was saved (seq {side_seq} < {forget_seq})"
            else:
                ids = t.row_id[: t.end]
                sc, why = hx.check_file(self.path, side, self.params(), c.verify_checksum, np.sort(ids[ids >= 0]))
        if sc is not None:
            try:
                idx = hx.load(self.path, c.dim, t.live + 1024)
            except Exception as exc:  # hnswlib raises RuntimeError on a file it cannot read
                why = f"index file failed to load ({exc})"
                idx = None
        if idx is not None and sc is not None:
            late = t.row_id[: t.end]
            late = np.sort(late[late > sc.max_id])
            if len(late):
                hx.ensure_capacity(idx, len(late))
                idx.add_items(t.keys[t.id_to_row[late]], late, num_threads=self.threads(), replace_deleted=True)
            report["index"] = "loaded" if not len(late) else f"loaded, caught up {len(late)} records"
            self.seq = sc.seq if not len(late) else -1
        else:
            idx = hx.new_index(c.dim, t.live + 1024, c.M, c.ef_construction)
            ids = t.row_id[: t.end]
            ids = ids[ids >= 0]
            if len(ids):
                idx.add_items(t.keys[t.id_to_row[ids]], ids, num_threads=self.threads(), replace_deleted=True)
            report["index"] = f"rebuilt ({why})"
            self.seq = -1
        self.reflects = seq
        self.index = idx
        self.index.set_ef(c.ef)

    def add(self, keys: np.ndarray, ids: np.ndarray, seq: int) -> None:
        """Add unit ``keys`` [N, dim] under labels ``ids`` [N], committed at database ``seq``."""
        hx.ensure_capacity(self.index, len(ids))
        self.index.add_items(keys, ids, num_threads=self.threads(), replace_deleted=True)
        self.added_since_save += len(ids)
        self.reflects = seq

    def save_due(self) -> bool:
        """Whether ``save_every`` records were added since the last save."""
        return bool(self.config.save_every) and self.added_since_save >= self.config.save_every

    def remove(self, ids: np.ndarray, seq: int) -> None:
        """Mark labels ``ids`` deleted, forgotten at database ``seq``."""
        for i in ids.tolist():
            self.index.mark_deleted(i)
        self.reflects = seq

    def behind(self) -> bool:
        """Whether the saved file lacks adds or forgets the index in memory has."""
        return self.seq != self.reflects

    def save(self, table: Table) -> None:
        """Write the index and its sidecar (the seq it reflects, largest id) atomically."""
        ids = table.row_id[: table.end]
        max_id = int(ids.max()) if len(ids) else 0
        hx.save(self.index, self.path, self.reflects, max_id, self.params())
        self.seq = self.reflects
        self.added_since_save = 0

    def knn(self, q: np.ndarray, k: int, ef: int, filt: Callable[[int], bool] | None):
        """(labels [Q, k] int64, distances [Q, k]) at beam ``ef``. hnswlib keeps one ef per index,
        so setting it and querying are one step under the lock: another thread's beam must not leak
        into this query (the HNSW cap is only valid at the measured beam)."""
        with self.lock:
            self.index.set_ef(ef)
            try:
                return hx.labels_distances(self.index, q, k, filt)
            finally:
                self.index.set_ef(self.config.ef)
