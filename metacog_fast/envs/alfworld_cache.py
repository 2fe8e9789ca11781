"""Cache of the PDDL -> SAS translation that dominates an ALFWorld reset.

Measured on this machine (valid_seen game 0): a textworld reset of a tw-pddl game
costs ~0.7 s, of which ~0.25 s per PddlState is fast-downward's pure-Python
``pddl2sas`` translation, run twice per state (plain + optimised for replanning) and a
state is built in both ``load`` and ``reset``; parsing domain + grammar (GameLogic) is
~0.06 s. The translation is a pure function of (domain, problem, optimize), so it is
memoised here: in memory (pickled bytes, so every caller gets a fresh object that it
may mutate) and optionally on disk (``<dir>/<sha1>.pkl``, written atomically).

The cache is installed by replacing the ``fast_downward`` name inside
``textworld.envs.pddl.logic`` with a proxy whose ``pddl2sas`` is memoised; everything
else goes straight to the real module. Nothing outside textworld's PDDL games sees it.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


@dataclass
class CacheStats:
    """Counters of one :class:`TranslationCache` (process-wide)."""

    hits: int = 0
    """Translations served from memory or disk."""
    disk_hits: int = 0
    """Of the hits, those read from the disk cache."""
    misses: int = 0
    """Translations computed by fast-downward."""


class TranslationCache:
    """Memoises ``fast_downward.pddl2sas`` results: memory LRU + optional disk folder."""

    def __init__(self, max_items: int = 256, disk_dir: str | os.PathLike[str] | None = None) -> None:
        self.max_items = max_items
        self.disk_dir: Path | None = Path(disk_dir) if disk_dir else None
        self.stats = CacheStats()
        self._mem: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def key(domain: str, problem: str, optimize: bool) -> str:
        h = hashlib.sha1()
        for part in (domain, "\0", problem, "\0", "opt" if optimize else "plain"):
            h.update(part.encode("utf-8"))
        return h.hexdigest()

    def set_disk_dir(self, disk_dir: str | os.PathLike[str] | None) -> None:
        self.disk_dir = Path(disk_dir) if disk_dir else None

    def get_or_compute(self, real_pddl2sas: Any, domain: str, problem: str, verbose: bool, optimize: bool) -> Any:
        k = self.key(domain, problem, optimize)
        with self._lock:
            blob = self._mem.get(k)
            if blob is not None:
                self._mem.move_to_end(k)
                self.stats.hits += 1
                return pickle.loads(blob)
        blob = self._read_disk(k)
        if blob is not None:
            with self._lock:
                self.stats.hits += 1
                self.stats.disk_hits += 1
            self._remember(k, blob)
            return pickle.loads(blob)
        result = real_pddl2sas(domain, problem, verbose=verbose, optimize=optimize)
        blob = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        with self._lock:
            self.stats.misses += 1
        self._remember(k, blob)
        self._write_disk(k, blob)
        return result

    def clear(self) -> None:
        """Forget the in-memory entries (the disk folder is left alone)."""
        with self._lock:
            self._mem.clear()

    def _remember(self, k: str, blob: bytes) -> None:
        with self._lock:
            self._mem[k] = blob
            self._mem.move_to_end(k)
            while len(self._mem) > self.max_items:
                self._mem.popitem(last=False)

    def _read_disk(self, k: str) -> bytes | None:
        if self.disk_dir is None:
            return None
        path = self.disk_dir / f"{k}.pkl"
        try:
            blob = path.read_bytes()
            pickle.loads(blob)  # a truncated or foreign file is a miss, not a crash
            return blob
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, ValueError):
            return None

    def _write_disk(self, k: str, blob: bytes) -> None:
        if self.disk_dir is None:
            return
        self.disk_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.disk_dir, prefix=f".{k}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, self.disk_dir / f"{k}.pkl")
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise


class _CachingFastDownward:
    """Stands in for the ``fast_downward`` module inside ``textworld.envs.pddl.logic``."""

    def __init__(self, real: ModuleType, cache: TranslationCache) -> None:
        self._real = real
        self._cache = cache

    def pddl2sas(self, domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        return self._cache.get_or_compute(self._real.pddl2sas, domain, problem, verbose, optimize)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


TRANSLATION_CACHE = TranslationCache()
"""The process-wide cache used by every ALFWorld adapter."""


def install(disk_dir: str | os.PathLike[str] | None = None) -> TranslationCache:
    """Route textworld's PDDL translation through :data:`TRANSLATION_CACHE` (idempotent)."""
    from textworld.envs.pddl import logic as pddl_logic

    current = getattr(pddl_logic, "fast_downward", None)
    if not isinstance(current, _CachingFastDownward):
        import fast_downward

        pddl_logic.fast_downward = _CachingFastDownward(fast_downward, TRANSLATION_CACHE)
    if disk_dir is not None:
        TRANSLATION_CACHE.set_disk_dir(disk_dir)
    return TRANSLATION_CACHE


def uninstall() -> None:
    """Give textworld its real ``fast_downward`` back (the memory cache keeps its entries)."""
    from textworld.envs.pddl import logic as pddl_logic

    current = getattr(pddl_logic, "fast_downward", None)
    if isinstance(current, _CachingFastDownward):
        pddl_logic.fast_downward = current._real
