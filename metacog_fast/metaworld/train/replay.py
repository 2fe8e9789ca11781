"""Episode replay with sequence sampling; episodes persisted one ``.npz`` per episode.

An episode of ``T`` env steps is stored as ``T+1`` rows (row 0 = the reset observation):
obs [T+1, O], prev_action [T+1, A] (row 0 zeros), reward [T+1] (row 0 zero),
success [T+1] (bool per row), plus ``t_success`` (first 1-based step with
``info["success"]``, -1 if never) from which the SA labels are built (docs/design.md §3).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from metacog_fast._atomic import atomic_open

from metacog_fast.metrics import quantile_labels


@dataclass
class Episode:
    """One stored episode (see the module docstring for the layout)."""

    obs: np.ndarray
    """[T+1, O] float32 observations."""
    prev_action: np.ndarray
    """[T+1, A] float32; row t is the action that led to obs[t] (row 0 zeros)."""
    reward: np.ndarray
    """[T+1] float32; reward[t] came with obs[t] (reward[0] = 0)."""
    success: np.ndarray
    """[T+1] bool, ``info["success"]`` of each row (row 0 False)."""
    task: str
    """Task name."""
    T_max: int
    """Maximum episode length the labels are relative to."""
    source: str = "agent"
    """Who acted: "agent", "scripted:<noise>", ..."""
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    """Optional per-step arrays (e.g. "psi" [T+1, N] recorded while acting)."""

    @property
    def steps(self) -> int:
        return int(self.obs.shape[0] - 1)

    @property
    def t_success(self) -> int:
        """First 1-based step with success, -1 if none."""
        idx = np.flatnonzero(self.success)
        return int(idx[0]) if idx.size else -1

    def labels(self, N: int = 5) -> np.ndarray:
        """SA labels c_i = 1[t_success <= i/N * T_max], the same row for every step: [T+1, N]."""
        ts = self.t_success
        return quantile_labels(ts if ts >= 0 else None, self.T_max, N, steps=self.obs.shape[0])

    def validate(self) -> None:
        n = self.obs.shape[0]
        for name, arr in (("prev_action", self.prev_action), ("reward", self.reward), ("success", self.success)):
            if arr.shape[0] != n:
                raise ValueError(f"episode.{name}: expected {n} rows like obs, got {arr.shape[0]}")
        if not np.isfinite(self.obs).all():
            raise ValueError("episode.obs: contains NaN or Inf")

    def save(self, path: str | os.PathLike) -> Path:
        """Atomic write (temp file in the same folder, then os.replace)."""
        out = Path(path)
        with atomic_open(out, "wb") as f:
            np.savez(
                f, obs=self.obs, prev_action=self.prev_action, reward=self.reward, success=self.success,
                task=np.array(self.task), T_max=np.array(self.T_max), source=np.array(self.source),
                **{f"extra_{k}": v for k, v in self.extra.items()},
            )
        return out

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Episode":
        try:
            with np.load(path) as d:
                ep = cls(
                    obs=d["obs"].astype(np.float32), prev_action=d["prev_action"].astype(np.float32),
                    reward=d["reward"].astype(np.float32), success=d["success"].astype(bool),
                    task=str(d["task"]), T_max=int(d["T_max"]), source=str(d["source"]),
                    extra={k[6:]: d[k] for k in d.files if k.startswith("extra_")},
                )
        except (KeyError, ValueError, OSError) as exc:
            raise ValueError(f"replay file {path}: not a valid episode file ({exc})") from exc
        ep.validate()
        return ep


class EpisodeRecorder:
    """Accumulates one episode step by step. ``add(obs, action, reward, success)``."""

    def __init__(self, obs0: np.ndarray, action_dim: int, task: str, T_max: int, source: str) -> None:
        self.obs = [np.asarray(obs0, np.float32)]
        self.act = [np.zeros(action_dim, np.float32)]
        self.rew = [0.0]
        self.suc = [False]
        self.extra: dict[str, list[np.ndarray]] = {}
        self.task, self.T_max, self.source = task, T_max, source

    def add(self, obs: np.ndarray, action: np.ndarray, reward: float, success: bool) -> None:
        self.obs.append(np.asarray(obs, np.float32))
        self.act.append(np.asarray(action, np.float32))
        self.rew.append(float(reward))
        self.suc.append(bool(success))

    def add_extra(self, name: str, value: np.ndarray) -> None:
        self.extra.setdefault(name, []).append(np.asarray(value, np.float32))

    def finish(self) -> Episode:
        ep = Episode(
            obs=np.stack(self.obs), prev_action=np.stack(self.act), reward=np.asarray(self.rew, np.float32),
            success=np.asarray(self.suc, bool), task=self.task, T_max=self.T_max, source=self.source,
            extra={k: np.stack(v) for k, v in self.extra.items()},
        )
        ep.validate()
        return ep


_EP_RE = re.compile(r"^ep_(\d{6})\.npz$")


class ReplayBuffer:
    """Episodes in memory (optionally mirrored in a folder) with uniform sequence sampling.

    ``directory``: when given, every added episode is written there as ``ep_<index>.npz``
    and :meth:`load_dir` restores them (resume after a kill).
    """

    def __init__(self, directory: str | os.PathLike | None = None, N: int = 5) -> None:
        self.dir = Path(directory) if directory is not None else None
        self.N = N
        self.episodes: list[Episode] = []
        self._labels: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self.episodes)

    @property
    def steps(self) -> int:
        return sum(e.steps for e in self.episodes)

    def add(self, ep: Episode, persist: bool = True) -> None:
        ep.validate()
        if persist and self.dir is not None:
            ep.save(self.dir / f"ep_{len(self.episodes):06d}.npz")
        self.episodes.append(ep)
        self._labels.append(ep.labels(self.N))

    def extend(self, other: "ReplayBuffer") -> None:
        """Add another buffer's episodes in memory only (e.g. the pre-deployment replay)."""
        for ep in other.episodes:
            self.add(ep, persist=False)

    def load_dir(self, keep: int | None = None) -> None:
        """Load ``ep_*.npz`` from the folder in index order; files at index >= ``keep`` are deleted
        (written after the last checkpoint of an interrupted run)."""
        if self.dir is None or not self.dir.exists():
            return
        files = sorted((int(m.group(1)), p) for p in self.dir.iterdir() if (m := _EP_RE.match(p.name)))
        for i, p in files:
            if keep is not None and i >= keep:
                p.unlink()
                continue
            if i != len(self.episodes):
                raise ValueError(f"replay folder {self.dir}: missing episode file ep_{len(self.episodes):06d}.npz")
            self.add(Episode.load(p), persist=False)
        for p in self.dir.glob(".ep_*"):  # half-written temp files of a killed run
            p.unlink()
        if keep is not None and len(self.episodes) != keep:
            raise ValueError(f"replay folder {self.dir}: expected {keep} episodes, found {len(self.episodes)}")

    def sample(self, rng: np.random.Generator, batch: int, length: int) -> dict[str, np.ndarray]:
        """``batch`` sequences of ``length`` rows, episodes drawn in proportion to their length,
        start uniform. Returns obs [B, L, O], prev_action [B, L, A], reward [B, L], cont [B, L],
        labels [B, L, N] (float32)."""
        if not self.episodes:
            raise ValueError("replay: empty, add episodes before sampling")
        lens = np.array([e.obs.shape[0] for e in self.episodes], dtype=np.float64)
        if (lens < length).all():
            raise ValueError(f"length: {length} is longer than every stored episode (max {int(lens.max())} rows)")
        p = np.where(lens >= length, lens, 0.0)
        idx = rng.choice(len(self.episodes), size=batch, p=p / p.sum())
        out: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "prev_action", "reward", "cont", "labels")}
        for i in idx:
            ep = self.episodes[i]
            s = int(rng.integers(0, ep.obs.shape[0] - length + 1))
            sl = slice(s, s + length)
            out["obs"].append(ep.obs[sl])
            out["prev_action"].append(ep.prev_action[sl])
            out["reward"].append(ep.reward[sl])
            # Meta-World episodes are truncated, never terminated: continue = 1 everywhere.
            out["cont"].append(np.ones(length, np.float32))
            out["labels"].append(self._labels[i][sl])
        return {k: np.stack(v).astype(np.float32) for k, v in out.items()}


def merge(buffers: Iterable[ReplayBuffer], N: int = 5) -> ReplayBuffer:
    """A new in-memory buffer holding the episodes of all ``buffers``."""
    out = ReplayBuffer(None, N)
    for b in buffers:
        out.extend(b)
    return out
