"""The published DreamerV3 Meta-World curves (TD-MPC2's results, results/metaworld/published/).

Each file ``mw-<task>.csv`` (``<task>`` without ``-v3``) has the columns ``step,success,seed``: the
evaluation success rate of one seed at one env step, as TD-MPC2 published it
(github.com/nicklashansen/tdmpc2, ``results/dreamerv3/``; the README beside the files names the
commit and how those runs differ from ours).
"""
from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["PUBLISHED_DIR", "PublishedCurve", "load_published"]

PUBLISHED_DIR = Path("results/metaworld/published/dreamerv3")
"""Where the committed published curves live (relative to the repository root)."""

_COLUMNS = ("step", "success", "seed")


@dataclass
class PublishedCurve:
    """One task's published curves: ``seeds[seed] = (steps [n], success [n])`` in step order."""

    task: str
    """Meta-World task name (with ``-v3``)."""
    seeds: dict[int, tuple[np.ndarray, np.ndarray]]
    """Per seed: env steps [n] (int) and success rates [n] in [0, 1]."""

    def steps(self) -> np.ndarray:
        """Every step at which all seeds have a value, ascending."""
        common = None
        for s, _ in self.seeds.values():
            common = set(s.tolist()) if common is None else common & set(s.tolist())
        return np.array(sorted(common or ()), dtype=np.int64)

    def at(self, step: int) -> dict[int, float]:
        """{seed: success} of the seeds that have a value at ``step``."""
        out = {}
        for seed, (s, v) in self.seeds.items():
            hit = np.flatnonzero(s == step)
            if hit.size:
                out[seed] = float(v[hit[0]])
        return out

    def mean_at(self, step: int) -> float | None:
        """Mean over the seeds that have a value at ``step`` (None if none)."""
        vals = self.at(step)
        return float(np.mean(list(vals.values()))) if vals else None


def load_published(task: str, folder: str | os.PathLike = PUBLISHED_DIR) -> PublishedCurve:
    """The published DreamerV3 curve of ``task`` (e.g. "reach-v3") from ``folder``.

    ValueError naming the argument when the task has no file, or naming the file and row when the
    file is not a ``step,success,seed`` table of rates in [0, 1]."""
    if not isinstance(task, str) or not task:
        raise ValueError(f"task: expected a Meta-World task name such as 'reach-v3', got {task!r}")
    name = task[:-3] if task.endswith("-v3") else task
    path = Path(folder) / f"mw-{name}.csv"
    if not path.is_file():
        have = sorted(p.stem[3:] for p in Path(folder).glob("mw-*.csv")) if Path(folder).is_dir() else []
        raise ValueError(f"task: no published curve for {task!r} in {folder} (have: {', '.join(have) or 'none'})")
    rows: dict[int, list[tuple[int, float]]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or tuple(h.strip() for h in header) != _COLUMNS:
            raise ValueError(f"{path}: expected the header {','.join(_COLUMNS)}, got {header}")
        for i, row in enumerate(reader, start=2):
            if not row:
                continue
            try:
                step, success, seed = int(float(row[0])), float(row[1]), int(row[2])
            except (ValueError, IndexError):
                raise ValueError(f"{path}, line {i}: expected step,success,seed numbers, got {row}") from None
            if not 0.0 <= success <= 1.0 or step < 0:
                raise ValueError(f"{path}, line {i}: expected step >= 0 and success in [0, 1], got {row}")
            rows.setdefault(seed, []).append((step, success))
    if not rows:
        raise ValueError(f"{path}: holds no rows")
    seeds = {}
    for seed, pts in sorted(rows.items()):
        pts.sort()
        seeds[seed] = (np.array([p[0] for p in pts], np.int64), np.array([p[1] for p in pts], np.float64))
    canonical = task if task.endswith("-v3") else f"{task}-v3"
    return PublishedCurve(canonical, seeds)
