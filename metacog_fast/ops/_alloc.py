"""A size check before an op allocates what its arguments ask for: sizes that cannot fit in this
machine's memory are a ValueError naming them, never a MemoryError half-way or the OOM killer."""
from __future__ import annotations

import os

_GIB = 1024**3


def machine_bytes() -> int:
    """Physical memory of this machine in bytes (a large number where it cannot be read)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 50


def check_alloc(names: str, nbytes: int, what: str) -> None:
    """ValueError naming ``names`` when ``nbytes`` (what they make the op allocate) is more than
    this machine's memory."""
    have = machine_bytes()
    if nbytes > have:
        raise ValueError(f"{names}: {what} need {nbytes / _GIB:,.1f} GiB, more than this machine's memory "
                         f"({have / _GIB:,.1f} GiB)")
