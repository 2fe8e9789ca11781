"""The one small protocol every environment adapter follows, and its timing record.

    obs, info = env.reset()                      # info["task"]: str, info["admissible"]: list[str] | None
    obs, reward, done, info = env.step(action)   # info has "won"/"success"/"score" as the env has them
    env.expert()                                 # the expert's next action for the current state (or None)
    env.timings                                  # reset/step counts and wall seconds
    env.close()

Subclasses implement ``_reset`` / ``_step``; the public ``reset`` / ``step`` add the
wall-clock timing and the "episode already finished" guard, so every adapter times
its calls the same way.
"""
from __future__ import annotations

import abc
import time
from dataclasses import asdict, dataclass
from typing import Any


class EnvSetupError(RuntimeError):
    """An environment cannot start on this machine: the message says what is missing and how to fix it."""


class EpisodeFinishedError(RuntimeError):
    """``step`` was called after the episode ended; call ``reset()`` first."""


@dataclass
class EnvTimings:
    """Wall time spent inside an adapter's ``reset`` and ``step`` calls (time.perf_counter)."""

    resets: int = 0
    """Number of completed ``reset`` calls."""
    reset_seconds: float = 0.0
    """Total wall seconds spent in ``reset``."""
    steps: int = 0
    """Number of completed ``step`` calls."""
    step_seconds: float = 0.0
    """Total wall seconds spent in ``step``."""
    last_reset_seconds: float = 0.0
    """Wall seconds of the most recent ``reset``."""

    @property
    def steps_per_second(self) -> float:
        return self.steps / self.step_seconds if self.step_seconds > 0 else 0.0

    @property
    def mean_reset_seconds(self) -> float:
        return self.reset_seconds / self.resets if self.resets else 0.0

    def as_dict(self) -> dict[str, float]:
        out: dict[str, float] = asdict(self)
        out["steps_per_second"] = self.steps_per_second
        out["mean_reset_seconds"] = self.mean_reset_seconds
        return out


class Env(abc.ABC):
    """Base class of the adapters (Meta-World, ALFWorld, ScienceWorld).

    Observation types differ per environment (``np.ndarray [D]`` float32 for
    Meta-World, ``str`` for the text games); the control flow does not.
    """

    name: str = "env"

    def __init__(self) -> None:
        self.timings = EnvTimings()
        self._done = True  # no episode until the first reset

    # -- public protocol -------------------------------------------------------------
    def reset(self, **options: Any) -> tuple[Any, dict[str, Any]]:
        """Start a new episode. Returns ``(observation, info)``; info has ``task`` and ``admissible``."""
        t0 = time.perf_counter()
        obs, info = self._reset(**options)
        dt = time.perf_counter() - t0
        self.timings.resets += 1
        self.timings.reset_seconds += dt
        self.timings.last_reset_seconds = dt
        self._done = False
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]:
        """Apply one action. Returns ``(observation, reward, done, info)``."""
        if self._done:
            raise EpisodeFinishedError(
                f"{self.name}: step() called with no running episode (before reset() or after done=True); "
                "call reset() first"
            )
        t0 = time.perf_counter()
        obs, reward, done, info = self._step(action)
        self.timings.step_seconds += time.perf_counter() - t0
        self.timings.steps += 1
        self._done = bool(done)
        return obs, reward, done, info

    @abc.abstractmethod
    def expert(self) -> Any:
        """The expert's next action for the current state, or ``None`` when it has none."""

    def close(self) -> None:
        """Release the simulator (processes, libraries). Safe to call twice."""

    # -- for subclasses --------------------------------------------------------------
    @abc.abstractmethod
    def _reset(self, **options: Any) -> tuple[Any, dict[str, Any]]: ...

    @abc.abstractmethod
    def _step(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]: ...

    def __enter__(self) -> "Env":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
