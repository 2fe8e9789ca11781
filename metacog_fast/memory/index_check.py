"""Structural check of an hnswlib index file (hnswlib 0.8's format) before hnswlib reads it.

hnswlib trusts its file: a neighbour id past the element count, or a link to a level its target
does not have, makes a search read outside its arrays (a segfault, not an exception). This check
reads the file with numpy (memory-mapped) and finds such damage first; it runs on every load,
whatever ``verify_checksum`` says. It does not look inside the vectors (damage there gives wrong
neighbours, not a crash: the sidecar's sha256 catches it).

Layout: a 96-byte header; ``n`` elements of ``size_data_per_element`` bytes (level-0 links: a
uint32 whose low 16 bits count the neighbours and bit 16 marks a deleted element, then ``2M``
uint32 neighbour ids; the vector, ``dim`` float32; the label, uint64); then, per element, a uint32
byte size of its upper-level links and those links (per level: a uint32 count, then ``M`` ids).
"""
from __future__ import annotations

import os
import struct

import numpy as np

HEADER = struct.Struct("<QQQQQQiIQQQdQ")
"""offsetLevel0, max_elements, cur_element_count, size_data_per_element, label_offset, offsetData,
maxlevel, enterpoint_node, maxM, maxM0, M, mult, ef_construction."""

MAX_LEVEL = 64  # hnswlib draws levels as -ln(U) / ln(M): beyond 64 is damage, not chance


def check_structure(path: str, dim: int, M: int, ef_construction: int,
                    live_labels: np.ndarray | None = None) -> str | None:
    """None when the file at ``path`` is a well-formed hnswlib index of ``dim``-float vectors built
    with ``M`` and ``ef_construction`` (and, given ``live_labels`` [L] sorted int64, whose labels of
    elements not marked deleted are exactly those); else what is wrong, in words."""
    raw = np.memmap(path, dtype=np.uint8, mode="r") if os.path.getsize(path) else np.zeros(0, np.uint8)
    if len(raw) < HEADER.size:
        return f"{len(raw)} bytes, shorter than hnswlib's {HEADER.size}-byte header"
    (off0, max_el, n, per, label_off, data_off, maxlevel, enter, maxM, maxM0, m, _mult,
     efc) = HEADER.unpack_from(raw[:HEADER.size].tobytes())
    links0 = 4 + 4 * 2 * M
    want = {"offsetLevel0": (off0, 0), "M": (m, M), "maxM": (maxM, M), "maxM0": (maxM0, 2 * M),
            "ef_construction": (efc, ef_construction), "offsetData": (data_off, links0),
            "label_offset": (label_off, links0 + 4 * dim), "size_data_per_element": (per, links0 + 4 * dim + 8)}
    for name, (got, exp) in want.items():
        if got != exp:
            return f"header {name}={got}, expected {exp}"
    if n > max_el:
        return f"header counts {n} elements over a capacity of {max_el}"
    if n == 0:
        return None if len(raw) == HEADER.size else "an empty index with trailing bytes"
    if not (0 <= maxlevel < MAX_LEVEL) or enter >= n:
        return f"header entry point {enter} / top level {maxlevel} out of range for {n} elements"
    end0 = HEADER.size + n * per
    if end0 > len(raw) or (len(raw) - end0) % 4:
        return f"{len(raw)} bytes cannot hold {n} elements of {per} bytes and their links"
    block = raw[HEADER.size:end0].reshape(n, per)
    head = np.ascontiguousarray(block[:, :links0]).view("<u4")          # [n, 1 + 2M]
    count = head[:, 0] & 0xFFFF
    if (count > 2 * M).any():
        return f"element {int(np.argmax(count > 2 * M))} has {int(count.max())} level-0 neighbours (at most {2 * M})"
    used = np.arange(2 * M)[None, :] < count[:, None]
    if (head[:, 1:][used] >= n).any():
        return "a level-0 neighbour id past the element count"
    levels, why = _upper_levels(raw[end0:].view("<u4"), n, M, maxlevel)
    if why is not None:
        return why
    if levels[enter] != maxlevel:
        return f"entry point {enter} has level {levels[enter]}, the header says {maxlevel}"
    if live_labels is not None:
        labels = np.ascontiguousarray(block[:, label_off:label_off + 8]).view("<u8").ravel()
        deleted = (head[:, 0] >> 16) & 1
        live = np.sort(labels[deleted == 0].astype(np.int64))
        if not np.array_equal(live, live_labels):
            return (f"its {len(live)} live labels are not the database's {len(live_labels)} records "
                    f"up to the sidecar's max id")
    return None


def _upper_levels(u: np.ndarray, n: int, M: int, maxlevel: int) -> tuple[np.ndarray, str | None]:
    """Walk the per-element upper link lists (uint32 words ``u``); returns (level of each element [n],
    None) or (_, why). Most elements have none (a zero size word), so the walk jumps between the
    non-zero words: one Python step per element above level 0 (about n / M)."""
    levels = np.zeros(n, np.int64)
    chunk = M + 1  # words per level: count, M ids
    nz = np.flatnonzero(u)
    starts, owners, nlev = [], [], []
    w = count = 0
    while count < n:
        j = np.searchsorted(nz, w)
        z = int(nz[j]) if j < len(nz) else len(u)
        if count + (z - w) >= n:  # the rest are elements without upper levels
            w += n - count
            count = n
            break
        count += z - w
        w = z
        size = int(u[w])
        if size % (4 * chunk) or not 1 <= size // (4 * chunk) <= maxlevel:
            return levels, f"element {count} has an upper link list of {size} bytes"
        lev = size // (4 * chunk)
        if w + 1 + lev * chunk > len(u):
            return levels, f"element {count}'s upper links run past the end of the file"
        levels[count] = lev
        starts.append(w + 1)
        owners.append(count)
        nlev.append(lev)
        w += 1 + lev * chunk
        count += 1
    if w != len(u):
        return levels, f"{4 * (len(u) - w)} bytes after the last element's links"
    if starts:
        nlev_a = np.asarray(nlev)
        first = np.repeat(np.asarray(starts), nlev_a)
        lvl = np.concatenate([np.arange(1, k + 1) for k in nlev])      # level of each chunk
        base = first + (lvl - 1) * chunk
        chunks = u[base[:, None] + np.arange(chunk)[None, :]]            # [C, M + 1]
        cnt = chunks[:, 0] & 0xFFFF
        if (cnt > M).any():
            return levels, f"an upper-level list with {int(cnt.max())} neighbours (at most {M})"
        used = np.arange(M)[None, :] < cnt[:, None]
        ids = chunks[:, 1:]
        if (ids[used] >= n).any():
            return levels, "an upper-level neighbour id past the element count"
        need = np.broadcast_to(lvl[:, None], ids.shape)[used]
        if (levels[ids[used]] < need).any():
            return levels, "an upper-level neighbour that does not reach that level"
    return levels, None
