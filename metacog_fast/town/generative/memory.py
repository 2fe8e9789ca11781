"""The memory stream shared by the agents of one run: a
:class:`~metacog_fast.memory.MemoryStore` (one SQLite + HNSW store, records
filtered by agent), the MiniLM encoder, the importance cache and the
short-term memory. Every step's new memories and queries are embedded in one
encoder call and added in one ``store.add`` call."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from metacog_fast.memory import MemoryStore, ShortTermMemory

if TYPE_CHECKING:
    from metacog_fast.llm.grounding import TextEncoder

KINDS = ("observation", "conversation", "reflection", "meta", "plan")
"""Memory kinds of a generative agent (``meta`` = metacognition memories)."""


@dataclass
class PendingMemory:
    """A memory waiting for the step's batched embedding, importance rating and insertion."""

    agent: str
    """Owner."""
    text: str
    """Content, e.g. ``"Ada saw a zombie at the Park"``."""
    kind: str
    """One of :data:`KINDS`."""
    location: str | None = None
    """Where it happened."""
    importance: float | None = None
    """1-10; ``None`` = rate it with the LLM (cached by text)."""


class ThreadSafeEncoder:
    """Serialises a text encoder (``encode(list[str]) -> [N, D]``) for use from worker threads."""

    def __init__(self, encoder: TextEncoder) -> None:
        self.encoder = encoder
        self._lock = threading.Lock()
        self.seconds = 0.0
        self.cpu_seconds = 0.0  # CPU time of the calling thread inside encode()
        self.texts = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import time

        with self._lock:
            t0, c0 = time.perf_counter(), time.thread_time()
            out = np.asarray(self.encoder.encode(list(texts)), np.float32)
            self.seconds += time.perf_counter() - t0
            self.cpu_seconds += time.thread_time() - c0
            self.texts += len(texts)
            return out


class MemoryStream:
    """Long-term memory of every agent of a run plus their short-term memories.

    ``rate`` maps a list of (agent, text) to importances 1-10 (the LLM; results cached by text).
    """

    def __init__(self, store: MemoryStore, encoder: ThreadSafeEncoder, short_term: ShortTermMemory,
                 rate: Callable[[list[tuple[str, str]]], list[int]] | None = None) -> None:
        self.store = store
        self.encoder = encoder
        self.short_term = short_term
        self.rate = rate
        self.importance_cache: dict[str, int] = {}
        self.texts: dict[int, str] = {}
        self.kinds: dict[int, str] = {}

    def importance(self, items: list[PendingMemory], max_rated: int | None = None) -> list[float]:
        """Importance of each item: given, cached by text, or rated now (one rating per unique text).

        ``max_rated``: rate at most this many new texts (the newest); the others get the default 3."""
        todo: dict[str, str] = {}
        for m in items:
            if m.importance is None and m.text not in self.importance_cache:
                todo.setdefault(m.text, m.agent)
        if max_rated is not None:
            todo = dict(list(todo.items())[max(0, len(todo) - max_rated):])
        if todo and self.rate is not None:
            pairs = [(a, t) for t, a in todo.items()]
            for (a, t), r in zip(pairs, self.rate(pairs)):
                if r is not None:
                    self.importance_cache[t] = int(min(10, max(1, r)))
        return [float(m.importance if m.importance is not None else self.importance_cache.get(m.text, 3))
                for m in items]

    def commit(self, items: list[PendingMemory], now: float, extra_queries: Sequence[str] = (),
               importance: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Embed ``items`` and ``extra_queries`` in one encoder call, add the items in one store call.

        ``importance`` [N]: already computed values (else :meth:`importance` is called).
        Returns (ids [N], query embeddings [len(extra_queries), D]).
        """
        texts = [m.text for m in items] + list(extra_queries)
        if not texts:
            return np.empty(0, np.int64), np.empty((0, self.store.config.dim), np.float32)
        emb = self.encoder.encode(texts)
        n = len(items)
        ids = np.empty(0, np.int64)
        if n:
            imp = list(importance) if importance is not None else self.importance(items)
            if len(imp) != n:
                raise ValueError(f"importance: expected {n} values, got {len(imp)}")
            ids = self.store.add(emb[:n], imp, now, [m.agent for m in items], [m.kind for m in items],
                                 text=[m.text for m in items], location=[m.location for m in items])
            for i, m in zip(ids.tolist(), items):
                self.texts[i] = m.text
                self.kinds[i] = m.kind
        return ids, emb[n:]

    def retrieve(self, agent: str, query_emb: np.ndarray, k: int, now: float, kind: str | None = None) -> list[list[str]]:
        """Top-k memory texts of ``agent`` for each query [Q, D] (docs/design.md §1.4 score; updates last_access)."""
        if len(self.store) == 0:
            return [[] for _ in range(len(query_emb))]
        res = self.store.retrieve(query_emb, k, now, agent=agent, kind=kind)
        return [[self._text(i) for i in ids.tolist()] for ids, _ in res]

    def retrieve_kinds(self, agent: str, query_emb: np.ndarray, k: int, now: float) -> list[list[tuple[str, str]]]:
        """Like :meth:`retrieve` but with each memory's kind: [(kind, text)] per query."""
        if len(self.store) == 0:
            return [[] for _ in range(len(query_emb))]
        res = self.store.retrieve(query_emb, k, now, agent=agent)
        return [[(self.kinds.get(i, "?"), self._text(i)) for i in ids.tolist()] for ids, _ in res]

    def retrieve_text(self, agent: str, queries: Sequence[str], k: int, now: float) -> list[list[str]]:
        """Embed ``queries`` (one call) and retrieve for each."""
        if not queries:
            return []
        return self.retrieve(agent, self.encoder.encode(list(queries)), k, now)

    def _text(self, i: int) -> str:
        t = self.texts.get(i)
        if t is None:
            rec = self.store.get([i])[0]
            t = (rec.text or "") if rec is not None else ""
            self.texts[i] = t
        return t
