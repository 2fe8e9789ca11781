"""Episode-outcome metrics shared by the agents: quantile labels (docs/design.md §3), success
rate, tasks solved, steps to success."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from metacog_fast.metrics._checks import as_binary, as_vector, same_length


def quantile_labels(t_success: int | None, T_max: int, N: int = 5, steps: int | None = None) -> np.ndarray:
    """MUSE-WM self-assessment labels ``c_i = 1[t_success <= i/N * T_max]``, i = 1..N.

    ``t_success``: first step with ``info["success"]`` (1-based step count or any
    step index the caller uses consistently), ``None`` or negative when the episode
    never succeeded (all zeros). Returns float32 [N], or [steps, N] (the same row
    for every step of the episode) when ``steps`` is given.
    """
    if int(T_max) <= 0:
        raise ValueError(f"T_max: expected a positive episode length, got {T_max}")
    if int(N) <= 0:
        raise ValueError(f"N: expected a positive number of quantiles, got {N}")
    if steps is not None and int(steps) < 0:
        raise ValueError(f"steps: expected a non-negative step count, got {steps}")
    bounds = np.arange(1, int(N) + 1, dtype=np.float64) / int(N) * int(T_max)
    if t_success is None or t_success < 0:
        row = np.zeros(int(N), dtype=np.float32)
    else:
        if not np.isfinite(t_success):
            raise ValueError(f"t_success: expected a finite step or None, got {t_success}")
        row = (float(t_success) <= bounds).astype(np.float32)
    if steps is None:
        return row
    return np.tile(row, (int(steps), 1))


def success_rate(outcomes: Any, tasks: Sequence[Any] | None = None) -> float:
    """Mean success. With ``tasks`` (one id per episode) the mean over tasks of the
    per-task success rate (macro average, docs/design.md §3 ALFWorld)."""
    y = as_binary(outcomes, "outcomes")
    if tasks is None:
        return float(y.mean())
    t = np.asarray(list(tasks), dtype=object)
    if t.size != y.size:
        raise ValueError(f"tasks: expected {y.size} task ids to match outcomes, got {t.size}")
    per_task = [y[t == k].mean() for k in dict.fromkeys(t.tolist())]
    return float(np.mean(per_task))


def tasks_solved(outcomes: Any, tasks: Sequence[Any]) -> int:
    """Number of distinct tasks with at least one successful episode."""
    y = as_binary(outcomes, "outcomes")
    t = np.asarray(list(tasks), dtype=object)
    if t.size != y.size:
        raise ValueError(f"tasks: expected {y.size} task ids to match outcomes, got {t.size}")
    return int(len({k for k, ok in zip(t.tolist(), y.tolist()) if ok}))


def mean_steps_to_success(steps: Any, outcomes: Any) -> float:
    """Mean episode length over successful episodes; NaN when none succeeded."""
    s = as_vector(steps, "steps")
    y = as_binary(outcomes, "outcomes")
    same_length(s, y, "steps", "outcomes")
    if (s < 0).any():
        raise ValueError("steps: expected non-negative step counts")
    return float(s[y == 1].mean()) if y.any() else float("nan")


def mean_steps_charged(steps: Any, outcomes: Any, fail_steps: float = 100.0) -> float:
    """Mean steps per episode with ``fail_steps`` charged for each failure (docs/design.md §3 ALFWorld)."""
    s = as_vector(steps, "steps")
    y = as_binary(outcomes, "outcomes")
    same_length(s, y, "steps", "outcomes")
    return float(np.where(y == 1, s, float(fail_steps)).mean())
