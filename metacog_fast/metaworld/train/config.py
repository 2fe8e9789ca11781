"""Configuration of the MUSE-WM / Dreamer-v3 Meta-World protocol, with the three profiles
(``paper``, ``cpu``, ``smoke``)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from metacog_fast.metaworld.muse_wm.config import ActConfig
from metacog_fast.metaworld.models.dreamer import DreamerConfig

__all__ = ["AGENTS", "MT10", "NOVEL", "SR_Z", "ActConfig", "ProtocolConfig", "ScriptedConfig", "profile"]

MT10 = (
    "reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3",
    "drawer-close-v3", "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3",
)
NOVEL = (
    "button-press-topdown-wall-v3", "soccer-v3", "push-wall-v3", "push-back-v3", "coffee-button-v3",
    "plate-slide-v3", "peg-unplug-side-v3", "lever-pull-v3", "handle-press-v3", "door-unlock-v3",
)
AGENTS = ("muse", "dreamer")
SR_Z = ("prior", "posterior")


@dataclass
class ScriptedConfig:
    """Seeding of the pre-deployment replay with noisy scripted-policy episodes."""

    episodes_per_task: int = 8
    """Scripted episodes per MT10 task."""
    noise_levels: tuple[float, ...] = (0.0, 0.3, 0.6, 1.0)
    """Std of the Gaussian noise added to the expert action (cycled over episodes)."""
    delay_fractions: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    """The expert takes over only after this fraction of T_max (random actions before); 1.0 =
    never (a pure random-action failure). Cycled so that successes land in every quantile."""


@dataclass
class ProtocolConfig:
    """Everything one run of the protocol needs (pre-deployment + adaptation)."""

    profile: str = "cpu"
    """Profile name (informative)."""
    agent: str = "muse"
    """"muse" (SA loss + self-regulation) or "dreamer" (both off)."""
    model: DreamerConfig = field(default_factory=DreamerConfig)
    """World model and actor-critic."""
    act: ActConfig = field(default_factory=ActConfig)
    """Acting options (self_regulation is forced off for the Dreamer agent)."""
    scripted: ScriptedConfig = field(default_factory=ScriptedConfig)
    """Scripted-policy seeding of the pre-deployment replay."""
    train_tasks: tuple[str, ...] = MT10
    """Pre-deployment tasks (domain randomised: a new layout every episode)."""
    novel_tasks: tuple[str, ...] = NOVEL
    """Deployment tasks (task embedding zeroed)."""
    max_episode_steps: int = 200
    """T_max: episode length, and the horizon the SA quantiles divide."""
    pretrain_episodes: int = 20
    """Agent-policy episodes collected during pre-deployment (after the scripted seeding)."""
    pretrain_updates_per_episode: int = 30
    """Gradient updates after each pre-deployment episode."""
    pretrain_warmup_updates: int = 200
    """Updates on the scripted data before the first agent episode."""
    adapt_episodes: int = 20
    """Adaptation episodes per novel task."""
    adapt_updates_per_episode: int = 10
    """Updates after each adaptation episode (world model on real data, actor-critic imagined)."""
    adapt_new_fraction: float = 0.5
    """Fraction of each adaptation batch drawn from the new task's episodes (rest: pre-deployment replay)."""
    batch: int = 8
    """Sequences per update."""
    seq_len: int = 32
    """Rows per sequence."""
    ac_starts: int = 128
    """Posterior states the actor-critic imagines from per update."""
    checkpoint_every: int = 5
    """Episodes between checkpoints (and at every phase boundary)."""
    seed: int = 0
    """Seed of the run (env layouts, noise, sampling, initialisation)."""
    torch_threads: int = 1
    """torch intra-op threads."""

    def __post_init__(self) -> None:
        if self.agent not in AGENTS:
            raise ValueError(f"agent: expected one of {AGENTS}, got {self.agent!r}")
        if self.act.sr_z not in SR_Z:
            raise ValueError(f"act.sr_z: expected one of {SR_Z}, got {self.act.sr_z!r}")
        if self.agent == "dreamer":
            self.model.muse = False
            self.act.self_regulation = False
        else:
            self.model.muse = True
        if not 1 <= self.max_episode_steps <= 500:
            raise ValueError(f"max_episode_steps: expected 1..500, got {self.max_episode_steps}")
        if self.seq_len > self.max_episode_steps + 1:
            raise ValueError(f"seq_len: {self.seq_len} exceeds max_episode_steps + 1 = {self.max_episode_steps + 1}")
        if not 0.0 <= self.adapt_new_fraction <= 1.0:
            raise ValueError(f"adapt_new_fraction: expected a value in [0, 1], got {self.adapt_new_fraction}")
        self.model.obs_dim = 39 + 20  # state + one-hot over MT10 + novel tasks

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ProtocolConfig":
        d = dict(d)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"config: unknown keys {unknown}")
        model = DreamerConfig(**d.pop("model", {}))
        act = ActConfig(**d.pop("act", {}))
        sc = d.pop("scripted", {})
        scripted = ScriptedConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in sc.items()})
        for k in ("train_tasks", "novel_tasks"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(model=model, act=act, scripted=scripted, **d)


def profile(name: str, agent: str = "muse", **overrides: Any) -> ProtocolConfig:
    """The named profile for ``agent``; ``overrides`` replace top-level fields.

    - ``paper``: the paper's budget (XS world model here; 2M pre-deployment env steps of 500-step
      episodes, 20 adaptation episodes per novel task).
    - ``cpu``: both agents within about an hour on 2 busy shared cores (well under 2 h): 100-step
      episodes, scripted seeding (6 per MT10 task), 450 updates per agent.
    - ``smoke``: a tiny model and 2+2 tasks, minutes at most (used by the tests).
    """
    if name == "paper":
        cfg = ProtocolConfig(
            profile="paper", agent=agent, max_episode_steps=500, pretrain_episodes=4000,
            pretrain_updates_per_episode=250, pretrain_warmup_updates=5000, adapt_episodes=20,
            adapt_updates_per_episode=250, batch=16, seq_len=64, ac_starts=1024,
            scripted=ScriptedConfig(episodes_per_task=24), checkpoint_every=20,
        )
    elif name == "cpu":
        cfg = ProtocolConfig(
            profile="cpu", agent=agent, max_episode_steps=100, pretrain_episodes=10,
            pretrain_updates_per_episode=10, pretrain_warmup_updates=150, adapt_episodes=20,
            adapt_updates_per_episode=1, batch=8, seq_len=32, ac_starts=128,
            scripted=ScriptedConfig(episodes_per_task=6), checkpoint_every=5,
            model=DreamerConfig(wm_lr=3e-4, ac_lr=1e-4),
        )
    elif name == "smoke":
        cfg = ProtocolConfig(
            profile="smoke", agent=agent, max_episode_steps=20, pretrain_episodes=2,
            pretrain_updates_per_episode=2, pretrain_warmup_updates=2, adapt_episodes=2,
            adapt_updates_per_episode=1, batch=2, seq_len=8, ac_starts=8,
            train_tasks=MT10[:2], novel_tasks=NOVEL[:2],
            scripted=ScriptedConfig(episodes_per_task=2, noise_levels=(0.0, 0.5), delay_fractions=(0.0, 0.5)),
            checkpoint_every=1,
            model=DreamerConfig(preset=None, D=16, Hd=16, S=4, C=4, layers=1, horizon=4, wm_lr=1e-3, ac_lr=1e-3),
            act=ActConfig(H=3),
        )
    else:
        raise ValueError(f"profile: expected one of 'paper', 'cpu', 'smoke', got {name!r}")
    cfg = replace(cfg, **overrides) if overrides else cfg
    cfg.__post_init__()
    return cfg
