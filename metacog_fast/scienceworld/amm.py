"""AMM: salience gate, episodic records in the memory store, T1/T4 retrieval."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from metacog_fast.scienceworld.text import hash_vec, overlap, tokens

INVALID_MARKERS = ("no known action matches", "ambiguous request", "it's not clear how", "i'm not sure how")
IMPORTANCE = {"success": 10.0, "progress": 8.0, "near_miss": 5.0, "invalid": 3.0}
POSITIVE = ("success", "progress", "near_miss")


def is_invalid(observation: str) -> bool:
    """The simulator rejected the action (not admissible / not understood)."""
    o = observation.strip().lower()
    return any(o.startswith(m) for m in INVALID_MARKERS)


def salience(action: str, observation: str, delta: float, won: bool, task: str) -> str | None:
    """The record type a step deserves, or None (not stored).

    success: the task was completed; progress: the score rose; invalid: the simulator rejected
    the action; near_miss: an accepted action naming at least half of its words from the task
    description that did not (yet) raise the score - partial progress toward the goal.
    """
    if won:
        return "success"
    if delta > 0:
        return "progress"
    if is_invalid(observation):
        return "invalid"
    if delta == 0 and overlap(set(tokens(action)), set(tokens(task))) >= 0.5:
        return "near_miss"
    return None


@dataclass
class EpisodicRecord:
    """What AMM stores for one salient step."""

    task: str
    room: str | None
    context: list[str]
    """Last executed actions before this one."""
    action: str
    observation: str
    score_before: float
    score_after: float
    type: str

    def text(self) -> str:
        return (f"{self.type}: in the {self.room or 'unknown room'}, after {', '.join(self.context[-3:]) or 'the start'}, "
                f"'{self.action}' gave '{self.observation.strip()[:120]}' (score {self.score_before:g} -> {self.score_after:g})")


class AMM:
    """Episodic memory over a :class:`metacog_fast.memory.MemoryStore`; ``agent`` = the task name."""

    def __init__(self, store: Any, task_name: str, k: int = 3, embed: str = "hash") -> None:
        if embed not in ("hash", "minilm"):
            raise ValueError(f"embed: expected 'hash' or 'minilm', got {embed!r}")
        self.store = store
        self.task_name = task_name
        self.k = k
        self.embed_kind = embed
        self._encoder: Any = None
        self.clock = float(len(store))  # simulation time: one second per written or queried step

    def _embed(self, text: str) -> np.ndarray:
        if self.embed_kind == "hash":
            return hash_vec(text, self.store.config.dim)[None, :]
        if self._encoder is None:
            from metacog_fast.scoring.encoder import MiniLMEncoder

            self._encoder = MiniLMEncoder()
        return np.asarray(self._encoder.encode([text]), np.float32)

    @staticmethod
    def query_text(task: str, room: str | None, observation: str) -> str:
        return f"{task.strip()[:200]} in the {room or 'unknown room'}: {observation.strip()[:200]}"

    def write(self, rec: EpisodicRecord, task_desc: str) -> int:
        self.clock += 1.0
        emb = self._embed(self.query_text(task_desc, rec.room, rec.observation) + " " + rec.action)
        ids = self.store.add(emb, IMPORTANCE[rec.type], self.clock, self.task_name, rec.type,
                             text=rec.text(), location=rec.room, meta=asdict(rec))
        return int(ids[0])

    def retrieve(self, task_desc: str, room: str | None, observation: str) -> list[EpisodicRecord]:
        if len(self.store) == 0:
            return []
        self.clock += 1.0
        q = self._embed(self.query_text(task_desc, room, observation))
        ids, _ = self.store.retrieve(q, self.k, self.clock, agent=self.task_name)[0]
        out = []
        for r in self.store.get(ids):
            if r is not None and isinstance(r.meta, dict):
                out.append(EpisodicRecord(**r.meta))
        return out

    @staticmethod
    def boosts(records: list[EpisodicRecord], valid: set[str], strength: float) -> dict[str, float]:
        """T1 injection: + for actions of positive records valid now, - for recorded invalid ones."""
        b: dict[str, float] = {}
        for r in records:
            if r.action in valid:
                b[r.action] = b.get(r.action, 0.0) + (strength if r.type in POSITIVE else -strength)
        return b


def dumps(rec: EpisodicRecord) -> str:
    return json.dumps(asdict(rec))
