"""Replay of M_sa training data: pre-deployment and adaptation examples kept apart,
mixed in every incremental update (MUSE Alg. 4: "a replay of pre-deployment + new data").

Stored as embeddings (task [384], trajectory [384]) and labels, never as text,
so an update never re-runs the encoder.
"""
from __future__ import annotations

import numpy as np

PRE = 0
ADAPT = 1


class ReplayBuffer:
    """Two pools: ``pre`` (reservoir-sampled once full) and ``adapt`` (FIFO ring).

    ``capacity`` bounds each pool; ``sample(n, mix)`` draws ``round(n*mix)`` from
    ``pre`` and the rest from ``adapt`` (all from one pool when the other is empty).
    """

    def __init__(self, capacity: int = 20000, dim: int = 384, seed: int = 0) -> None:
        if int(capacity) < 1:
            raise ValueError(f"capacity: expected a positive size, got {capacity}")
        self.capacity = int(capacity)
        self.dim = int(dim)
        self._rng = np.random.default_rng(seed)
        self._task = [np.empty((0, self.dim), np.float32), np.empty((0, self.dim), np.float32)]
        self._traj = [np.empty((0, self.dim), np.float32), np.empty((0, self.dim), np.float32)]
        self._label = [np.empty((0,), np.float32), np.empty((0,), np.float32)]
        self._seen = [0, 0]

    def __len__(self) -> int:
        return sum(len(x) for x in self._label)

    def size(self, source: int) -> int:
        return len(self._label[source])

    def add(self, task_emb: np.ndarray, traj_emb: np.ndarray, labels: np.ndarray, source: int) -> None:
        """Add rows: task_emb [N or 1, D], traj_emb [N, D], labels [N] in {0, 1}; source PRE or ADAPT."""
        if source not in (PRE, ADAPT):
            raise ValueError(f"source: expected PRE (0) or ADAPT (1), got {source}")
        traj = np.asarray(traj_emb, np.float32)
        task = np.asarray(task_emb, np.float32)
        y = np.asarray(labels, np.float32).reshape(-1)
        if traj.ndim != 2 or traj.shape[1] != self.dim:
            raise ValueError(f"traj_emb: expected shape [N, {self.dim}], got {list(traj.shape)}")
        if task.ndim != 2 or task.shape[1] != self.dim or task.shape[0] not in (1, traj.shape[0]):
            raise ValueError(f"task_emb: expected shape [{traj.shape[0]} or 1, {self.dim}], got {list(task.shape)}")
        if y.shape[0] != traj.shape[0]:
            raise ValueError(f"labels: expected {traj.shape[0]} labels, got {y.shape[0]}")
        if not np.isin(y, (0.0, 1.0)).all():
            raise ValueError("labels: expected binary outcomes 0/1")
        if not (np.isfinite(traj).all() and np.isfinite(task).all()):
            raise ValueError("traj_emb/task_emb: contain NaN or infinite values")
        task = np.broadcast_to(task, traj.shape)
        free = min(self.capacity - len(self._label[source]), traj.shape[0])
        if free > 0:  # bulk append while there is room
            self._task[source] = np.concatenate([self._task[source], task[:free]])
            self._traj[source] = np.concatenate([self._traj[source], traj[:free]])
            self._label[source] = np.concatenate([self._label[source], y[:free]])
            self._seen[source] += free
        for i in range(max(free, 0), traj.shape[0]):
            self._replace_row(task[i], traj[i], y[i], source)

    def _replace_row(self, task: np.ndarray, traj: np.ndarray, y: float, s: int) -> None:
        self._seen[s] += 1
        if s == PRE:  # reservoir: every pre-deployment example kept with equal probability
            j = int(self._rng.integers(0, self._seen[s]))
            if j >= self.capacity:
                return
        else:  # FIFO: overwrite the oldest adaptation example
            j = (self._seen[s] - 1) % self.capacity
        self._task[s][j], self._traj[s][j], self._label[s][j] = task, traj, y

    def arrays(self, source: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(task [N, D], traj [N, D], labels [N]) of one pool, or of both when source is None."""
        srcs = [PRE, ADAPT] if source is None else [source]
        return (np.concatenate([self._task[s] for s in srcs]), np.concatenate([self._traj[s] for s in srcs]),
                np.concatenate([self._label[s] for s in srcs]))

    def sample(self, n: int, mix: float = 0.5) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A minibatch of ``n`` rows, fraction ``mix`` from the pre-deployment pool."""
        if len(self) == 0:
            raise ValueError("replay: empty, nothing to sample")
        if not 0.0 <= float(mix) <= 1.0:
            raise ValueError(f"mix: expected a fraction in [0, 1], got {mix}")
        n_pre = int(round(n * float(mix)))
        if self.size(PRE) == 0:
            n_pre = 0
        elif self.size(ADAPT) == 0:
            n_pre = n
        parts = []
        for s, k in ((PRE, n_pre), (ADAPT, n - n_pre)):
            if k > 0:
                idx = self._rng.integers(0, self.size(s), k)
                parts.append((self._task[s][idx], self._traj[s][idx], self._label[s][idx]))
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))  # type: ignore[return-value]

    def state(self) -> dict[str, np.ndarray]:
        """Flat arrays for saving (safetensors)."""
        out = {}
        for s, name in ((PRE, "pre"), (ADAPT, "adapt")):
            out[f"replay.{name}.task"] = self._task[s]
            out[f"replay.{name}.traj"] = self._traj[s]
            out[f"replay.{name}.label"] = self._label[s]
            out[f"replay.{name}.seen"] = np.asarray([self._seen[s]], np.int64)
        return out

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        for s, name in ((PRE, "pre"), (ADAPT, "adapt")):
            self._task[s] = np.ascontiguousarray(state[f"replay.{name}.task"], np.float32)
            self._traj[s] = np.ascontiguousarray(state[f"replay.{name}.traj"], np.float32)
            self._label[s] = np.ascontiguousarray(state[f"replay.{name}.label"], np.float32)
            self._seen[s] = int(state[f"replay.{name}.seen"][0])
