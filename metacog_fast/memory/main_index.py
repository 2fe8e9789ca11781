"""The main HNSW index of the store and its lifecycle: loaded on open when its sidecar matches the
database (seq, parameters, checksum), caught up with records added after its save, else rebuilt
from the columns; saved (atomically, with the database seq) when it fell behind; queried at a
given beam under its own lock (hnswlib keeps one ef per index).

The file operations are in :mod:`metacog_fast.memory.index`.
"""
from __future__ import annotations

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
        """Database seq the saved file matches (-1: the file is behind the index in memory)."""
        self.added_since_save = 0
        self.lock = threading.Lock()  # hnswlib keeps one ef per index: set + query as one step

    def params(self) -> dict:
        c = self.config
        return {"dim": c.dim, "M": c.M, "ef_construction": c.ef_construction, "space": "cosine"}

    def threads(self) -> int:
        return self.config.num_threads if self.config.num_threads > 0 else -1

    def open(self, table: Table, seq: int, forget_seq: int, report: dict[str, Any]) -> None:
        """Load the saved index if it matches the database (``seq``: its last write, ``forget_seq``:
        its last delete) and catch it up with later records, else rebuild it from ``table``; says
        which in ``report["index"]``."""
        t, c = table, self.config
        side, why = hx.check_sidecar(self.path, self.params(), c.verify_checksum)
        idx = None
        if side is not None:
            if side.seq > seq:
                why = f"index seq {side.seq} is ahead of the database seq {seq}"
            elif side.seq < forget_seq:
                why = f"records were forgotten after the index was saved (seq {side.seq} < {forget_seq})"
            else:
                try:
                    idx = hx.load(self.path, c.dim, t.live + 1024)
                except Exception as exc:  # hnswlib raises RuntimeError on a damaged file
                    why = f"index file failed to load ({exc})"
                    idx = None
        if idx is not None and side is not None:
            late = t.row_id[: t.end]
            late = np.sort(late[late > side.max_id])
            if len(late):
                hx.ensure_capacity(idx, len(late))
                idx.add_items(t.keys[t.id_to_row[late]], late, num_threads=self.threads(), replace_deleted=True)
            report["index"] = "loaded" if not len(late) else f"loaded, caught up {len(late)} records"
            self.seq = side.seq if not len(late) else -1
        else:
            idx = hx.new_index(c.dim, t.live + 1024, c.M, c.ef_construction)
            ids = t.row_id[: t.end]
            ids = ids[ids >= 0]
            if len(ids):
                idx.add_items(t.keys[t.id_to_row[ids]], ids, num_threads=self.threads(), replace_deleted=True)
            report["index"] = f"rebuilt ({why})"
            self.seq = -1
        self.index = idx
        self.index.set_ef(c.ef)

    def add(self, keys: np.ndarray, ids: np.ndarray) -> None:
        """Add unit ``keys`` [N, dim] under labels ``ids`` [N]."""
        hx.ensure_capacity(self.index, len(ids))
        self.index.add_items(keys, ids, num_threads=self.threads(), replace_deleted=True)
        self.added_since_save += len(ids)

    def save_due(self) -> bool:
        """Whether ``save_every`` records were added since the last save."""
        return bool(self.config.save_every) and self.added_since_save >= self.config.save_every

    def remove(self, ids: np.ndarray) -> None:
        for i in ids.tolist():
            self.index.mark_deleted(i)

    def save(self, seq: int, table: Table) -> None:
        """Write the index and its sidecar (database ``seq``, largest id) atomically."""
        ids = table.row_id[: table.end]
        max_id = int(ids.max()) if len(ids) else 0
        hx.save(self.index, self.path, seq, max_id, self.params())
        self.seq = seq
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
