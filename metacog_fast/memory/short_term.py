"""Short-term memory of generative agents (paper 001): per agent, at most 7 recent
items, each forgotten about 30 s of simulation time after it was stored.

Kept apart from the long-term :class:`~metacog_fast.memory.MemoryStore`; plain
Python (a deque per agent): at most ``capacity`` items, so nothing to accelerate.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ShortTermConfig:
    """Settings of :class:`ShortTermMemory`."""

    capacity: int = 7
    """Items kept per agent; storing one more evicts the oldest (paper 001: seven)."""
    ttl: float = 30.0
    """Seconds of simulation time an item lives (paper 001: about 30 s)."""

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"capacity: expected >= 1, got {self.capacity}")
        if not (self.ttl > 0 and math.isfinite(self.ttl)):
            raise ValueError(f"ttl: expected a positive finite number of seconds, got {self.ttl}")


@dataclass(frozen=True)
class ShortTermItem:
    """One short-term memory: what was stored and when (simulation seconds)."""

    item: Any
    """The stored content (text, record id, observation...)."""
    time: float
    """Simulation time at which it was stored, in seconds."""


class ShortTermMemory:
    """Per-agent bounded, expiring buffer. Times are simulation seconds and must not go back."""

    def __init__(self, config: ShortTermConfig | None = None, **overrides: Any) -> None:
        base = config or ShortTermConfig()
        self.config = ShortTermConfig(**{**base.__dict__, **overrides}) if overrides else base
        self._buf: dict[str, deque[ShortTermItem]] = {}

    def add(self, agent: str, item: Any, now: float) -> None:
        """Store ``item`` for ``agent`` at time ``now``; evicts expired items and, past capacity, the oldest."""
        if not isinstance(agent, str) or not agent:
            raise ValueError(f"agent: expected a non-empty string, got {agent!r}")
        now = self._time(now)
        q = self._buf.setdefault(agent, deque())
        if q and now < q[-1].time:
            raise ValueError(f"now: time went back ({now} < last stored {q[-1].time}) for agent {agent!r}")
        self._expire(q, now)
        q.append(ShortTermItem(item, now))
        while len(q) > self.config.capacity:
            q.popleft()

    def items(self, agent: str, now: float) -> list[ShortTermItem]:
        """Live items of ``agent`` at time ``now``, oldest first (expired ones are dropped)."""
        now = self._time(now)
        q = self._buf.get(agent)
        if q is None:
            return []
        self._expire(q, now)
        return list(q)

    def clear(self, agent: str | None = None) -> None:
        """Forget everything of ``agent`` (or of every agent)."""
        if agent is None:
            self._buf.clear()
        else:
            self._buf.pop(agent, None)

    def __len__(self) -> int:
        """Items held over all agents, expired ones included until the next access."""
        return sum(len(q) for q in self._buf.values())

    def _expire(self, q: deque[ShortTermItem], now: float) -> None:
        while q and now - q[0].time >= self.config.ttl:
            q.popleft()

    @staticmethod
    def _time(now: float) -> float:
        t = float(now)
        if not math.isfinite(t):
            raise ValueError(f"now: expected a finite time in seconds, got {now!r}")
        return t
