"""The hnswlib index beside the SQLite file (derived data: rebuildable from the database).

Files: ``<db>.hnsw`` (hnswlib's format) and ``<db>.hnsw.json``, the sidecar:
``{"format", "seq", "max_id", "size", "sha256", "dim", "M", "ef_construction", "space"}``
(``format`` 1, written before issue 55, has ``crc32`` instead of ``sha256``; still read).
Both are written atomically (temp file, fsync, ``os.replace``), the index first. ``seq`` is the
database seq the saved index reflects (every add and forget before it is in the index, none after).
Before hnswlib reads the file, :func:`check_file` compares it with the sidecar (size, and the
sha256 with ``verify_checksum``) and :mod:`.index_check` checks its structure (always), so a
damaged file is rebuilt instead of reaching hnswlib; nothing is trusted from timestamps.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import zlib
from dataclasses import dataclass

import hnswlib
import numpy as np

from metacog_fast.memory.index_check import check_structure

SIDECAR_FORMAT = 2
_READ_FORMATS = (1, 2)


class StaleDatabaseError(RuntimeError):
    """The database is older than its index: missing, emptied, or replaced by an older copy while
    ``<db>.hnsw`` (which may hold the only remaining copy of records' embeddings) is still there."""

    def __init__(self, path: str, index_path: str, what: str) -> None:
        self.path = path
        self.index_path = index_path
        super().__init__(
            f"{path}: the database is older than its index {index_path} ({what}); nothing was opened or "
            f"modified. What you can do: (1) if the database was lost or damaged, put it back from a copy "
            f"made with MemoryStore.backup() (records added after the copy are lost), then move the index "
            f"files {index_path} and {index_path}.json aside and open again (the index is rebuilt from the "
            f"database); (2) if you replaced the database on purpose (an older copy, a new empty store), "
            f"move {index_path} and {index_path}.json aside and open again; (3) to salvage the embeddings the "
            f"index still holds (not their texts): hnswlib.Index(space='cosine', dim=...).load_index("
            f"'{index_path}'), then get_ids_list() and get_items(ids) (the ids are record ids).")


def check_database_present(db_path: str, index_path: str) -> None:
    """Raise :class:`StaleDatabaseError` when the database file is missing or empty (zero bytes)
    while the index file is there: SQLite would open it as a new empty store, and the first save
    would overwrite the index that may still hold the records' embeddings."""
    if not os.path.exists(index_path):
        return
    try:
        size = os.path.getsize(db_path)
    except FileNotFoundError:
        raise StaleDatabaseError(db_path, index_path, "the database file is missing") from None
    if size == 0:
        raise StaleDatabaseError(db_path, index_path, "the database file is empty (0 bytes)")


@dataclass(frozen=True)
class Sidecar:
    """What the sidecar says about the index file it was written with."""

    seq: int
    """Database ``seq`` the saved index reflects."""
    max_id: int
    """Largest record id in the index then (records above it were added later)."""
    size: int
    """Index file size in bytes."""
    digest: tuple[str, str]
    """("sha256", hex) (format 2) or ("crc32", decimal) (format 1) of the index file."""


def file_digest(path: str, algo: str, chunk: int = 1 << 24) -> str:
    """sha256 (hex) or crc32 (decimal) of the file at ``path``."""
    h = hashlib.sha256() if algo == "sha256" else None
    crc = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return h.hexdigest() if h is not None else str(crc)
            if h is not None:
                h.update(b)
            else:
                crc = zlib.crc32(b, crc)


def _atomic_write_bytes(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: str) -> None:
    fd = os.open(os.path.dirname(os.path.abspath(path)) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temps(path: str) -> None:
    """Delete temp files left by a save that a crash interrupted (call under the store's lock)."""
    for p in glob.glob(glob.escape(path) + ".tmp-*") + glob.glob(glob.escape(path) + ".json.tmp-*"):
        try:
            os.remove(p)
        except OSError:
            pass


def new_index(dim: int, capacity: int, M: int, ef_construction: int) -> hnswlib.Index:
    idx = hnswlib.Index(space="cosine", dim=dim)
    idx.init_index(max_elements=max(capacity, 16), M=M, ef_construction=ef_construction, allow_replace_deleted=True)
    return idx


def save(idx: hnswlib.Index, path: str, seq: int, max_id: int, params: dict) -> None:
    """Save ``idx`` to ``path`` and its sidecar (``seq``: the database seq ``idx`` reflects), both
    atomically."""
    tmp = f"{path}.tmp-{os.getpid()}"
    idx.save_index(tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    size = os.path.getsize(tmp)
    digest = file_digest(tmp, "sha256")
    os.replace(tmp, path)
    side = {"format": SIDECAR_FORMAT, "seq": seq, "max_id": max_id, "size": size, "sha256": digest, **params}
    _atomic_write_bytes(path + ".json", json.dumps(side).encode())
    _fsync_dir(path)


def read_sidecar(path: str) -> tuple[dict | None, str]:
    """The parsed sidecar of the index at ``path`` (any readable format), else (None, why)."""
    try:
        with open(path + ".json", "rb") as f:
            side = json.loads(f.read())
    except FileNotFoundError:
        return None, "no index sidecar"
    except (OSError, ValueError) as exc:
        return None, f"unreadable index sidecar ({exc})"
    if not isinstance(side, dict) or side.get("format") not in _READ_FORMATS:
        return None, "unknown index sidecar format"
    return side, "ok"


def sidecar_seq(side: dict | None) -> int | None:
    """The ``seq`` a parsed sidecar records (None: absent or not an integer)."""
    try:
        return int(side["seq"]) if side is not None else None
    except (KeyError, TypeError, ValueError):
        return None


def check_file(path: str, side: dict, params: dict, verify_checksum: bool,
               live_ids: np.ndarray | None = None) -> tuple[Sidecar | None, str]:
    """The sidecar if the index file at ``path`` matches it and its structure holds, else
    (None, why). Always: parameters, size, hnswlib's structure (:func:`.index_check.check_structure`:
    header, neighbour ids and levels in range, and, given ``live_ids`` [L] sorted int64, that the
    index's live labels up to the sidecar's ``max_id`` are exactly those); with ``verify_checksum``
    also the file's digest."""
    for k, v in params.items():
        if side.get(k) != v:
            return None, f"index built with {k}={side.get(k)!r}, store wants {v!r}"
    try:
        algo = "sha256" if side["format"] == 2 else "crc32"
        sc = Sidecar(int(side["seq"]), int(side["max_id"]), int(side["size"]), (algo, str(side[algo])))
    except (KeyError, TypeError, ValueError):
        return None, "index sidecar lacks fields"
    try:
        size = os.path.getsize(path)
    except OSError:
        return None, "no index file"
    if size != sc.size:
        return None, f"index file size {size} != {sc.size} in the sidecar"
    if verify_checksum and file_digest(path, sc.digest[0]) != sc.digest[1]:
        return None, "index file checksum does not match the sidecar"
    expect = None if live_ids is None else live_ids[live_ids <= sc.max_id]
    why = check_structure(path, params["dim"], params["M"], params["ef_construction"], expect)
    if why is not None:
        return None, f"index file damaged: {why}"
    return sc, "ok"


def load(path: str, dim: int, capacity: int) -> hnswlib.Index:
    idx = hnswlib.Index(space="cosine", dim=dim)
    idx.load_index(path, max_elements=max(capacity, 16), allow_replace_deleted=True)
    return idx


def ensure_capacity(idx: hnswlib.Index, extra: int) -> None:
    """Grow ``idx`` so that ``extra`` more items fit (deleted slots are reused first)."""
    need = idx.element_count + extra
    if need > idx.max_elements:
        idx.resize_index(max(need, int(idx.max_elements * 1.5) + 1024))


def query_threads(n_queries: int) -> int:
    """hnswlib threads for a batch of queries: 1 for fewer than 4 (hnswlib starts its threads per
    call, ~50 us each, more than one query costs), else all cores (25 queries: ~2x on 2 cores)."""
    return 1 if n_queries < 4 else -1


def labels_distances(idx: hnswlib.Index, q: np.ndarray, k: int, filt=None) -> tuple[np.ndarray, np.ndarray]:
    labels, dist = idx.knn_query(q, k=k, num_threads=query_threads(len(q)), filter=filt)
    return labels.astype(np.int64, copy=False), dist
