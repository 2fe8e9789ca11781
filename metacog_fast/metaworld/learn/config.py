"""Configuration of a single-task Dreamer-v3 learning run on Meta-World (``metacog train learn``):
what determines the learning curve (:class:`LearnConfig`, with the world model in
:class:`LearnModelConfig`) and how the run is driven (:class:`LearnJob`: folder, progress).

The published DreamerV3 configuration for vector observations (NM512/dreamerv3-torch
``configs.yaml`` defaults + ``dmc_proprio``; danijar/dreamerv3) trains with a replay ratio of 512
replayed steps per env step, batch 16 x 64, imagination from every posterior state of the batch,
a deter-512 RSSM with 5 x 1024 observation MLPs. The defaults below are the reduced values this
2-core CPU runs (docs/muse_wm.md "Single-task learning curves" gives both and why).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from metacog_fast.metaworld.models.dreamer import PRECISIONS, DreamerConfig

__all__ = ["LEARN_SEEDS", "LEARN_TASKS", "LearnConfig", "LearnJob", "LearnModelConfig", "PUBLISHED_TRAIN_RATIO", "SNAPSHOT_IGNORE"]

PUBLISHED_TRAIN_RATIO = 512
"""Replayed steps per env step of the published DreamerV3 configuration (``train_ratio``)."""

SNAPSHOT_IGNORE = ("env_steps",)
"""Fields of :class:`LearnConfig` a resumed run may change: the target only says where to stop."""


@dataclass
class LearnModelConfig(DreamerConfig):
    """The Dreamer-v3 world model and actor-critic of a learning run (DreamerConfig with the
    defaults of these runs: no self-assessment loss, bfloat16 matmuls where the machine has them)."""

    muse: bool = False
    """Train the self-assessment head too (False: plain Dreamer-v3, the learning runs)."""
    precision: str = "auto"
    """Matmul precision of the updates: "float32", "bfloat16" (autocast; docs/muse_wm.md) or "auto"
    (bfloat16 on a GPU or a CPU with AVX512-BF16/AMX, else float32). A run resumed on another
    machine keeps "auto" and may change precision there; ``state["precisions"]`` records each part."""


@dataclass
class LearnConfig:
    """Everything that determines one learning curve: task, seed, budget, replay ratio, evaluation."""

    task: str = "reach-v3"
    """Meta-World MT50 task name (e.g. reach-v3, button-press-topdown-v3, drawer-close-v3)."""
    seed: int = 0
    """Run seed (layouts, initialisation, exploration noise, replay sampling)."""
    env_steps: int = 100_000
    """Stop when this many training env steps are done (a resumed run may raise it)."""
    max_episode_steps: int = 500
    """Episode length (Meta-World's 500 steps)."""
    prefill_steps: int = 2500
    """Env steps of uniformly random actions before the agent acts (DreamerV3's prefill)."""
    pretrain_updates: int = 100
    """Updates right after the prefill."""
    train_ratio: float = 128.0
    """Replayed steps per env step (updates per episode = train_ratio * steps / (batch * seq_len));
    the published DreamerV3 value is 512."""
    batch: int = 16
    """Sequences per update."""
    seq_len: int = 64
    """Rows per sequence."""
    ac_starts: int | None = 256
    """Posterior states the actor-critic imagines from per update (None: all batch * seq_len)."""
    eval_every: int = 5000
    """Training env steps between evaluations (a multiple of max_episode_steps); one at step 0 too."""
    eval_episodes: int = 10
    """Episodes per evaluation (new layouts, actor mean, no training)."""
    checkpoint_every: int = 4
    """Training episodes between checkpoints (and after every evaluation)."""
    torch_threads: int = 1
    """torch intra-op threads (and the compiled core's)."""
    model: LearnModelConfig = field(default_factory=LearnModelConfig)
    """World model and actor-critic."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> "LearnConfig":
        """ValueError naming the field when a value is out of range."""
        from metacog_fast.metaworld.env import MAX_EPISODE_STEPS, _canonical, all_task_names

        if _canonical(self.task) not in all_task_names():
            raise ValueError(f"task: expected a Meta-World MT50 task name such as 'reach-v3', got {self.task!r}")
        self.task = _canonical(self.task)
        positive = ("env_steps", "max_episode_steps", "batch", "seq_len", "eval_every", "eval_episodes",
                    "checkpoint_every", "torch_threads")
        for name in positive:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}: expected a positive integer, got {v!r}")
        for name in ("prefill_steps", "pretrain_updates"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name}: expected an integer >= 0, got {v!r}")
        if self.max_episode_steps > MAX_EPISODE_STEPS:
            raise ValueError(f"max_episode_steps: expected 1..{MAX_EPISODE_STEPS}, got {self.max_episode_steps}")
        if not self.train_ratio > 0:
            raise ValueError(f"train_ratio: expected a positive number, got {self.train_ratio!r}")
        if self.seq_len > self.max_episode_steps + 1:
            raise ValueError(f"seq_len: {self.seq_len} exceeds max_episode_steps + 1 = {self.max_episode_steps + 1}")
        if self.ac_starts is not None and self.ac_starts < 1:
            raise ValueError(f"ac_starts: expected a positive integer or None, got {self.ac_starts!r}")
        if self.eval_every % self.max_episode_steps:
            raise ValueError(f"eval_every: expected a multiple of max_episode_steps ({self.max_episode_steps}), "
                             f"got {self.eval_every}")
        if self.model.precision not in PRECISIONS:
            raise ValueError(f"model.precision: expected one of {PRECISIONS}, got {self.model.precision!r}")
        self.model.obs_dim = 39 + 20  # Meta-World state + the task one-hot of the environment adapter
        self.model.action_dim = 4
        self.model.seed = self.seed
        return self

    @property
    def agent(self) -> str:
        """The checkpoint's agent name (``train.checkpoint`` writes it in the tensor metadata)."""
        return "muse" if self.model.muse else "dreamer"

    def updates_per_step(self) -> float:
        """Updates per training env step after the prefill."""
        return self.train_ratio / (self.batch * self.seq_len)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LearnConfig":
        """Inverse of :meth:`to_dict`; ValueError naming unknown keys."""
        d = dict(d)
        unknown = sorted(set(d) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"config: unknown keys {unknown}")
        model = dict(d.pop("model", {}))
        bad = sorted(set(model) - {f.name for f in fields(LearnModelConfig)})
        if bad:
            raise ValueError(f"config.model: unknown keys {bad}")
        return cls(model=LearnModelConfig(**model), **d)


@dataclass
class LearnJob:
    """How ``metacog train learn`` drives a run (nothing here changes the curve)."""

    run_dir: str | None = None
    """Run folder (None: runs/metaworld/learn/<task>/seed<seed>); resumed when it holds a run."""
    progress: bool = True
    """Show a progress bar (env steps, last evaluation's success, updates)."""
    out: str | None = None
    """Also copy the evaluation records (curve.json, curve.csv) to this folder after the run."""


LEARN_TASKS: tuple[str, ...] = ("reach-v3", "button-press-topdown-v3", "drawer-close-v3")
"""The three easy MT50 tasks of the learning runs (docs/muse_wm.md "Single-task learning curves")."""

LEARN_SEEDS: tuple[int, ...] = (0, 1)
"""Seeds of the learning runs."""

