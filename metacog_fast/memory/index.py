"""The hnswlib index beside the SQLite file (derived data: always rebuildable).

Files: ``<db>.hnsw`` (hnswlib's format) and ``<db>.hnsw.json``, the sidecar:
``{"seq", "max_id", "size", "crc32", "dim", "M", "ef_construction", "space"}``.
Both are written atomically (temp file, fsync, ``os.replace``), the index first;
the index is trusted on open only if the sidecar's ``seq`` and checksum match
(see :func:`check_sidecar`) — never by guessing from timestamps.
"""
from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass

import hnswlib
import numpy as np

SIDECAR_FORMAT = 1


@dataclass(frozen=True)
class Sidecar:
    """What the sidecar says about the index file it was written with."""

    seq: int
    """SQLite ``seq`` when the index was saved."""
    max_id: int
    """Largest record id in the index then (records above it were added later)."""
    size: int
    """Index file size in bytes."""
    crc32: int
    """CRC32 of the index file."""


def file_crc32(path: str, chunk: int = 1 << 24) -> int:
    crc = 0
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return crc
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
    """Delete temp files left by a save that a crash interrupted (one process owns a store)."""
    import glob

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
    """Save ``idx`` to ``path`` and its sidecar, both atomically."""
    tmp = f"{path}.tmp-{os.getpid()}"
    idx.save_index(tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    size = os.path.getsize(tmp)
    crc = file_crc32(tmp)
    os.replace(tmp, path)
    side = {"format": SIDECAR_FORMAT, "seq": seq, "max_id": max_id, "size": size, "crc32": crc, **params}
    _atomic_write_bytes(path + ".json", json.dumps(side).encode())
    _fsync_dir(path)


def check_sidecar(path: str, params: dict, verify_checksum: bool) -> tuple[Sidecar | None, str]:
    """The sidecar if the index file at ``path`` matches it, else (None, why)."""
    try:
        with open(path + ".json", "rb") as f:
            side = json.loads(f.read())
    except FileNotFoundError:
        return None, "no index sidecar"
    except (OSError, ValueError) as exc:
        return None, f"unreadable index sidecar ({exc})"
    if not isinstance(side, dict) or side.get("format") != SIDECAR_FORMAT:
        return None, "unknown index sidecar format"
    for k, v in params.items():
        if side.get(k) != v:
            return None, f"index built with {k}={side.get(k)!r}, store wants {v!r}"
    try:
        sc = Sidecar(int(side["seq"]), int(side["max_id"]), int(side["size"]), int(side["crc32"]))
    except (KeyError, TypeError, ValueError):
        return None, "index sidecar lacks fields"
    try:
        size = os.path.getsize(path)
    except OSError:
        return None, "no index file"
    if size != sc.size:
        return None, f"index file size {size} != {sc.size} in the sidecar"
    if verify_checksum and file_crc32(path) != sc.crc32:
        return None, "index file checksum does not match the sidecar"
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
