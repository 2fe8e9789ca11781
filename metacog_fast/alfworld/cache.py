"""Caches for the pure, repeated parsing work inside an ALFWorld (textworld tw-pddl) game.

Measured on this machine (valid_seen game 0): a textworld reset of a tw-pddl game
costs ~0.7 s, of which ~0.25 s per PddlState is fast-downward's pure-Python
``pddl2sas`` translation, run twice per state (plain + optimised for replanning) and a
state is built in both ``load`` and ``reset``; parsing domain + grammar (GameLogic) is
~0.06 s. The translation is a pure function of (domain, problem, optimize), so it is
memoised here: in memory (pickled bytes, so every caller gets a fresh object that it
may mutate) and optionally on disk (``<dir>/<sha1>.pkl``, written atomically).

After that, what remains of a reset, and nearly all of a step, is text generation: for
every admissible action textworld re-parses the action's command template and the
grammar's conditions with tatsu (then deep-copies contexts). Those parses are pure
functions of short strings, so they are memoised too (:class:`TextgenParseCache`): a
template parse is stored once and handed out as a deep copy (callers mutate symbols);
a conjunctive-query ``Rule`` is shared (textgen only reads it). Measured: steps ~3x and
cached resets ~2x faster; observations and admissible lists are identical (tested
against the plain textworld env with the caches off).

Installation replaces three names inside textworld with memoising stand-ins:
``fast_downward`` in ``textworld.envs.pddl.logic`` (only ``pddl2sas`` is memoised) and
``_parse_and_convert`` / ``Rule`` in ``textworld.envs.pddl.textgen`` (only the text
generator of tw-pddl games uses that module). :func:`uninstall` puts the originals back;
:func:`disabled` does so for a ``with`` block.
"""
from __future__ import annotations

import copy
import hashlib
import os
import pickle
import threading
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator
from metacog_fast._atomic import atomic_write_bytes


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
        atomic_write_bytes(self.disk_dir / f"{k}.pkl", blob)


class _CachingFastDownward:
    """Stands in for the ``fast_downward`` module inside ``textworld.envs.pddl.logic``."""

    def __init__(self, real: ModuleType, cache: TranslationCache) -> None:
        self._real = real
        self._cache = cache

    def pddl2sas(self, domain: str, problem: str, verbose: bool = False, optimize: bool = False) -> Any:
        return self._cache.get_or_compute(self._real.pddl2sas, domain, problem, verbose, optimize)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class TextgenParseCache:
    """Memoises textworld's tatsu parses of grammar templates and conjunctive queries."""

    def __init__(self, real_parse: Any, real_rule: Any, max_items: int = 65536) -> None:
        self.real_parse = real_parse
        self.real_rule = real_rule
        self.max_items = max_items
        self.hits = 0
        self.misses = 0
        self._templates: dict[Any, Any] = {}
        self._queries: dict[str, Any] = {}

    def clear(self) -> None:
        self._templates.clear()
        self._queries.clear()

    def parse_and_convert(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("trace"):  # TW_CSG_TRACE debugging wants the real parser's trace
            return self.real_parse(*args, **kwargs)
        kwargs.pop("trace", None)
        key = (args, tuple(sorted(kwargs.items())))
        parsed = self._templates.get(key)
        if parsed is None:
            self.misses += 1
            parsed = self.real_parse(*args, **kwargs)
            if len(self._templates) < self.max_items:
                self._templates[key] = parsed
            else:
                return parsed
        else:
            self.hits += 1
        return copy.deepcopy(parsed)  # derive() sets each symbol's context in place

    def parse_conjunctive_query(self, expr: str) -> Any:
        rule = self._queries.get(expr)
        if rule is None:
            self.misses += 1
            rule = self.real_rule.parse_conjunctive_query(expr)
            if len(self._queries) < self.max_items:
                self._queries[expr] = rule
        else:
            self.hits += 1
        return rule


class _RuleProxy:
    """Stands in for ``textworld.logic.Rule`` inside ``textworld.envs.pddl.textgen``."""

    def __init__(self, cache: TextgenParseCache) -> None:
        self._cache = cache

    def parse_conjunctive_query(self, expr: str) -> Any:
        return self._cache.parse_conjunctive_query(expr)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cache.real_rule, name)


TRANSLATION_CACHE = TranslationCache()
"""The process-wide translation cache used by every ALFWorld adapter."""

TEXTGEN_CACHE: TextgenParseCache | None = None
"""The process-wide template/query parse cache (created by :func:`install`)."""


def install(disk_dir: str | os.PathLike[str] | None = None) -> TranslationCache:
    """Route textworld's PDDL translation and template parsing through the caches (idempotent)."""
    global TEXTGEN_CACHE
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen

    if not isinstance(getattr(pddl_logic, "fast_downward", None), _CachingFastDownward):
        import fast_downward

        pddl_logic.fast_downward = _CachingFastDownward(fast_downward, TRANSLATION_CACHE)
    if TEXTGEN_CACHE is None:
        TEXTGEN_CACHE = TextgenParseCache(textgen._parse_and_convert, textgen.Rule)
    if not isinstance(textgen.Rule, _RuleProxy):
        textgen._parse_and_convert = TEXTGEN_CACHE.parse_and_convert
        textgen.Rule = _RuleProxy(TEXTGEN_CACHE)
    if disk_dir is not None:
        TRANSLATION_CACHE.set_disk_dir(disk_dir)
    return TRANSLATION_CACHE


def uninstall() -> None:
    """Give textworld its real functions back (the caches keep their entries)."""
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen

    current = getattr(pddl_logic, "fast_downward", None)
    if isinstance(current, _CachingFastDownward):
        pddl_logic.fast_downward = current._real
    if TEXTGEN_CACHE is not None and isinstance(textgen.Rule, _RuleProxy):
        textgen._parse_and_convert = TEXTGEN_CACHE.real_parse
        textgen.Rule = TEXTGEN_CACHE.real_rule


def clear() -> None:
    """Empty the in-memory caches (the disk folder is left alone)."""
    TRANSLATION_CACHE.clear()
    if TEXTGEN_CACHE is not None:
        TEXTGEN_CACHE.clear()


def is_installed() -> bool:
    from textworld.envs.pddl import logic as pddl_logic

    return isinstance(getattr(pddl_logic, "fast_downward", None), _CachingFastDownward)


@contextmanager
def disabled() -> Iterator[None]:
    """Run a block with textworld's own (uncached) parsing; restores the previous state."""
    was = is_installed()
    uninstall()
    try:
        yield
    finally:
        if was:
            install()
