"""TrajectoryScorer: MUSE's language self-assessment M_sa (paper 000 §4.1.3, Alg. 2-4).

``score(task, plan, chunks)`` -> p [N]: p_k = sigmoid(g_eta(concat(M(chunk_k ⊕ plan), M(task)))),
M the MiniLM encoder (task embedding cached per task), g_eta the fused kernel
``score_trajectories``. Training minimises BCE on (task, plan, chunk, outcome)
examples with the encoder frozen; ``fit`` is pre-deployment training (Alg. 3),
``fit_incremental`` the online update of g_eta during adaptation (Alg. 4) with a
replay mixing pre-deployment and adaptation data.

Saved as a folder: ``head.safetensors`` (g_eta, names l0.w ... out.b; plus the
replay pools when asked) and ``config.json``, each written atomically, the JSON last. The JSON
records the head file's size and sha256 (``files``), and :meth:`TrajectoryScorer.load` checks them
before reading a tensor: zeros written inside the file leave a valid safetensors file that only
the digest catches. A folder saved before the digest was recorded loads with a RuntimeWarning
(nothing to check it against; :func:`record_head_digest` adds the record).
"""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from metacog_fast._atomic import atomic_write_bytes
from metacog_fast._integrity import sha256_file, verify_file
from metacog_fast.ops.scoring import init_scoring_head, score_trajectories
from metacog_fast.ops.scoring.naive import score_logits
from metacog_fast.scoring.chunks import render_trajectory
from metacog_fast.scoring.config import ScorerConfig
from metacog_fast.scoring.encoder import MiniLMEncoder, check_texts
from metacog_fast.scoring.replay import ADAPT, PRE, ReplayBuffer

HEAD_FILE = "head.safetensors"
CONFIG_FILE = "config.json"
FORMAT_VERSION = 1


class TrajectoryScorer:
    """M_sa(I, P, tau): the probability that an episode with task I, plan P and trajectory chunk tau succeeds."""

    def __init__(self, config: ScorerConfig | None = None, encoder: MiniLMEncoder | None = None) -> None:
        self.config = cfg = config or ScorerConfig()
        if cfg.chunk_size < 1:
            raise ValueError(f"chunk_size: expected a positive size, got {cfg.chunk_size}")
        self.encoder = encoder if encoder is not None else MiniLMEncoder(cfg.encoder)
        self.head: dict[str, torch.Tensor] = init_scoring_head(2 * cfg.emb_dim, cfg.hidden, cfg.seed)
        self.replay = ReplayBuffer(cfg.replay_capacity, cfg.emb_dim, cfg.seed)
        self._gen = torch.Generator().manual_seed(cfg.seed)
        self._opt: torch.optim.Optimizer | None = None

    # -- inference ------------------------------------------------------------------------
    def score(self, task: str, plan: str, chunks: Sequence[Sequence[Any]]) -> np.ndarray:
        """Success probabilities [len(chunks)] of each chunk (a list of (action, observation) pairs,
        e.g. one LLM rollout) for ``task`` and ``plan``."""
        (task,) = check_texts([task], "task")
        if isinstance(chunks, (str, bytes)) or not isinstance(chunks, Sequence):
            raise TypeError(f"chunks: expected a list of chunks, got {type(chunks).__name__}")
        if len(chunks) == 0:
            return np.empty((0,), np.float32)
        texts = [render_trajectory(c, plan) for c in chunks]
        task_emb = self.encoder.encode_task(task)
        traj_emb = self.encoder.encode(texts)
        return self.score_embeddings(task_emb, traj_emb)

    def score_embeddings(self, task_emb: np.ndarray, traj_emb: np.ndarray) -> np.ndarray:
        """p [N] from task_emb [N or 1, 384] and traj_emb [N, 384] (the fused kernel)."""
        with torch.no_grad():
            head = {k: v.detach() for k, v in self.head.items()}
            return np.asarray(score_trajectories(np.asarray(task_emb, np.float32), np.asarray(traj_emb, np.float32),
                                                 head, backend=self.config.backend), np.float32)

    def embed_examples(self, examples: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(task_emb [N, 384], traj_emb [N, 384], labels [N]) of examples with ``task``, ``plan``,
        ``chunk`` and ``label`` (attributes, or keys of a mapping)."""
        if len(examples) == 0:
            raise ValueError("examples: expected at least one (task, plan, chunk, label) example")

        def get(e: Any, k: str) -> Any:
            return e[k] if isinstance(e, dict) else getattr(e, k)

        tasks = check_texts([get(e, "task") for e in examples], "examples[].task")
        labels = np.asarray([float(get(e, "label")) for e in examples], np.float32)
        if not np.isin(labels, (0.0, 1.0)).all():
            raise ValueError("examples[].label: expected binary outcomes 0/1")
        texts = [render_trajectory(get(e, "chunk"), get(e, "plan")) for e in examples]
        task_emb = np.concatenate([self.encoder.encode_task(t) for t in tasks])
        return task_emb, self.encoder.encode(texts), labels

    # -- training -------------------------------------------------------------------------
    def _params(self) -> list[torch.Tensor]:
        for v in self.head.values():
            v.requires_grad_(True)
        return list(self.head.values())

    def _optimizer(self) -> torch.optim.Optimizer:
        if self._opt is None:
            self._opt = torch.optim.Adam(self._params(), lr=self.config.lr, weight_decay=self.config.weight_decay)
        return self._opt

    def loss(self, task_emb: np.ndarray, traj_emb: np.ndarray, labels: np.ndarray) -> float:
        """Mean BCE of the head on embedded examples (no update)."""
        with torch.no_grad():
            z = score_logits(torch.as_tensor(task_emb), torch.as_tensor(traj_emb), self.head)
            return float(F.binary_cross_entropy_with_logits(z, torch.as_tensor(labels)))

    def _step(self, task: np.ndarray, traj: np.ndarray, y: np.ndarray) -> float:
        opt = self._optimizer()
        z = score_logits(torch.from_numpy(task), torch.from_numpy(traj), self.head)
        loss = F.binary_cross_entropy_with_logits(z, torch.from_numpy(y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())

    def fit(self, examples: Sequence[Any], epochs: int | None = None) -> list[float]:
        """Pre-deployment training (BCE, Adam) on ``examples``; they join the replay's
        pre-deployment pool. Returns the mean training loss of each epoch."""
        task, traj, y = self.embed_examples(examples)
        return self.fit_embeddings(task, traj, y, epochs)

    def fit_embeddings(self, task_emb: np.ndarray, traj_emb: np.ndarray, labels: np.ndarray,
                       epochs: int | None = None) -> list[float]:
        """:meth:`fit` on already embedded examples."""
        self.replay.add(task_emb, traj_emb, labels, PRE)
        task, traj, y = (np.ascontiguousarray(a, np.float32) for a in (task_emb, traj_emb, labels))
        task = np.ascontiguousarray(np.broadcast_to(task, traj.shape))
        n, bs = len(y), self.config.batch_size
        history = []
        for _ in range(int(self.config.epochs if epochs is None else epochs)):
            perm = torch.randperm(n, generator=self._gen).numpy()
            losses = [self._step(task[perm[s : s + bs]], traj[perm[s : s + bs]], y[perm[s : s + bs]])
                      for s in range(0, n, bs)]
            history.append(float(np.mean(losses)))
        return history

    def fit_incremental(self, examples: Sequence[Any], steps: int | None = None) -> list[float]:
        """Online update of g_eta (Alg. 4): ``examples`` join the adaptation pool, then
        ``steps`` minibatch updates, each mixing pre-deployment and adaptation data by
        ``replay_mix``. Returns the loss of each step."""
        task, traj, y = self.embed_examples(examples)
        self.replay.add(task, traj, y, ADAPT)
        out = []
        for _ in range(int(self.config.incremental_steps if steps is None else steps)):
            t, x, lab = self.replay.sample(self.config.batch_size, self.config.replay_mix)
            out.append(self._step(t, x, lab))
        return out

    # -- persistence ----------------------------------------------------------------------
    def save(self, path: str | os.PathLike, include_replay: bool = True) -> Path:
        """Write ``head.safetensors`` and ``config.json`` into folder ``path`` (atomic writes)."""
        from safetensors.numpy import save as st_save

        folder = Path(path)
        tensors = {k: v.detach().contiguous().numpy() for k, v in self.head.items()}
        if include_replay:
            tensors.update(self.replay.state())
        data = st_save(tensors, metadata={"format_version": str(FORMAT_VERSION)})
        atomic_write_bytes(folder / HEAD_FILE, data)
        meta = {"format_version": FORMAT_VERSION, "config": self.config.to_dict(),
                "files": {HEAD_FILE: {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}}}
        atomic_write_bytes(folder / CONFIG_FILE, json.dumps(meta, indent=2).encode())
        return folder

    @classmethod
    def load(cls, path: str | os.PathLike, encoder: MiniLMEncoder | None = None) -> "TrajectoryScorer":
        """Read a folder written by :meth:`save`. ``encoder``: reuse a loaded encoder. The head file is
        checked against the size and sha256 config.json records before it is read (ModelFileError,
        a ValueError, when they differ; a RuntimeWarning when config.json records none)."""
        from safetensors import SafetensorError
        from safetensors.numpy import load_file

        folder = Path(path)
        cfg_path, head_path = folder / CONFIG_FILE, folder / HEAD_FILE
        for p in (cfg_path, head_path):
            if not p.is_file():
                raise FileNotFoundError(f"path: {folder} has no {p.name} (expected a folder written by save())")
        try:
            meta = json.loads(cfg_path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"path: {cfg_path} is not valid JSON ({exc})") from None
        if not isinstance(meta, dict) or "config" not in meta:
            raise ValueError(f"path: {cfg_path} has no 'config' object")
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"path: {cfg_path} has format_version {meta.get('format_version')!r}, expected {FORMAT_VERSION}")
        config = ScorerConfig.from_dict(meta["config"])
        _check_head(folder, meta)
        try:
            tensors = load_file(str(head_path))
        except (SafetensorError, OSError) as exc:
            raise ValueError(f"path: {head_path} is not a readable safetensors file ({exc})") from None
        scorer = cls(config, encoder=encoder)
        missing = [k for k in scorer.head if k not in tensors]
        if missing:
            raise ValueError(f"path: {head_path} lacks head tensors {missing}")
        for k in scorer.head:
            t = torch.from_numpy(np.array(tensors[k], np.float32))
            if tuple(t.shape) != tuple(scorer.head[k].shape):
                raise ValueError(f"path: {head_path}[{k!r}] has shape {list(t.shape)}, config expects "
                                 f"{list(scorer.head[k].shape)}")
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"path: {head_path}[{k!r}] contains NaN or infinite values")
            scorer.head[k] = t
        if "replay.pre.task" in tensors:
            scorer.replay.load_state(tensors)
        return scorer


def _check_head(folder: Path, meta: dict) -> None:
    """The head file against the size and sha256 that config.json (``meta``) records for it."""
    head_path, cfg_path = folder / HEAD_FILE, folder / CONFIG_FILE
    files = meta.get("files")
    rec = files.get(HEAD_FILE) if isinstance(files, dict) else None
    if not isinstance(rec, dict) or not isinstance(rec.get("sha256"), str):
        warnings.warn(f"{head_path}: {cfg_path} records no size and sha256 for it (saved before they were "
                      "recorded), so damage to the file cannot be detected; once you trust the file, "
                      "record them with metacog_fast.scoring.scorer.record_head_digest(folder)",
                      RuntimeWarning, stacklevel=3)
        return
    verify_file(head_path, sha256=rec["sha256"], size=rec.get("bytes"), manifest=str(cfg_path),
                remedy="the scorer's weights are damaged or were replaced: restore the folder from where it "
                       "came (a shipped scorer: reinstall metacog_fast) or train and save it again")


def record_head_digest(path: str | os.PathLike) -> Path:
    """Add the size and sha256 of ``path/head.safetensors`` as it is now to ``path/config.json``
    (a folder saved before :meth:`TrajectoryScorer.save` recorded them); returns config.json's path.
    It certifies the file as it is: run it only on a head you trust."""
    folder = Path(path)
    cfg_path, head_path = folder / CONFIG_FILE, folder / HEAD_FILE
    meta = json.loads(cfg_path.read_text())
    meta["files"] = {HEAD_FILE: {"bytes": head_path.stat().st_size, "sha256": sha256_file(head_path)}}
    atomic_write_bytes(cfg_path, json.dumps(meta, indent=2).encode())
    return cfg_path
