"""Reflection memory: reflections stored in the shared ``MemoryStore`` (SQLite + HNSW).

Each record: agent = the game key, kind = ``"reflection"``, created = episode index × 1 h of
simulation time, text = the reflection. ``last(game, n)`` returns the n most recent (oldest
first) by a recency-only retrieval (weights (1, 0, 0), exact, read-only) sorted by creation time, so the last n
reflections of the task go into the next prompt.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

HOUR = 3600.0


class ReflectionMemory:
    """Per-task reflections in a :class:`metacog_fast.memory.MemoryStore` at ``path``."""

    def __init__(self, path: str | Path, encoder: Any) -> None:
        from metacog_fast.memory import MemoryStore

        self.encoder = encoder
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.store = MemoryStore.open(str(path), dim=384)

    def clear(self, game: str) -> int:
        """Forget every reflection of ``game`` (a resumed run re-adds them from its records)."""
        return self.store.forget(agent=game, kind="reflection")

    def add(self, game: str, episode: int, text: str) -> int:
        if not isinstance(text, str) or not text.strip():
            raise ValueError("text: expected a non-empty reflection")
        emb = np.asarray(self.encoder.encode([text]), np.float32)
        ids = self.store.add(emb, importance=5.0, created=float(episode) * HOUR, agent=game, kind="reflection",
                             text=[text], meta={"episode": int(episode)})
        self.store.flush()
        return int(ids[0])

    def last(self, game: str, n: int) -> list[str]:
        """The ``n`` most recent reflections of ``game``, oldest first."""
        if n <= 0:
            return []
        q = np.ones((1, 384), np.float32)
        # Recency alone ranks them; every record of the game is read (a game has tens at most)
        # and sorted by creation time, so ties of the decayed score cannot reorder them.
        (ids, _scores), = self.store.retrieve(q, k=max(n, 256), now=0.0, agent=game, kind="reflection",
                                              weights=(1.0, 0.0, 0.0), exact=True, touch=False)
        recs = [r for r in self.store.get(ids) if r is not None]
        recs.sort(key=lambda r: r.created)
        return [r.text for r in recs][-n:]

    def close(self) -> None:
        self.store.close()
