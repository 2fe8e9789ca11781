"""Meta-World v3 (``metaworld`` 3.x on MuJoCo) behind the common protocol.

Observation: float32 ``[39 + K]`` = the 39-d Meta-World state (hand, gripper, two
object poses, the previous frame's 18 values, goal position) followed by a one-hot of
the task over ``one_hot_tasks`` (default ``MT10_TASKS + NOVEL_TASKS``, K = 20;
``zero_task_embedding=True`` zeroes it, as for the novel tasks in docs/design.md §3).
Action: ``[4]`` in [-1, 1] (xyz delta of the hand, gripper effort).

Domain randomisation: with ``randomize=True`` (default) every reset draws new object
and goal positions from the environment's own generator, seeded with ``seed`` at
construction, so a given seed replays the same sequence of layouts. With
``randomize=False`` every episode uses the single layout drawn at construction.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metacog_fast._extras import require
from metacog_fast.envs.base import Env
from metacog_fast.envs.probe import ProbeResult, package_version

# The 10 tasks of the MT10 training set (Meta-World's ``MT10_V3`` order).
MT10_TASKS: tuple[str, ...] = (
    "reach-v3",
    "push-v3",
    "pick-place-v3",
    "door-open-v3",
    "drawer-open-v3",
    "drawer-close-v3",
    "button-press-topdown-v3",
    "peg-insert-side-v3",
    "window-open-v3",
    "window-close-v3",
)

# The 10 novel MT50 tasks of docs/design.md §3 (deployment adaptation). The paper's "push-block" is not a
# Meta-World name: it is push-back-v3 (push the block backwards), the MT50 push task outside MT10.
NOVEL_TASKS: tuple[str, ...] = (
    "button-press-topdown-wall-v3",
    "soccer-v3",
    "push-wall-v3",
    "push-back-v3",
    "coffee-button-v3",
    "plate-slide-v3",
    "peg-unplug-side-v3",
    "lever-pull-v3",
    "handle-press-v3",
    "door-unlock-v3",
)

STATE_DIM = 39
ACTION_DIM = 4
MAX_EPISODE_STEPS = 500



TASK_ALIASES = {"push-block": "push-back", "level-pull": "lever-pull"}
"""Names used in the MUSE paper's figures that Meta-World spells differently."""


def _canonical(task: str) -> str:
    """docs/design.md names tasks without the version suffix ("soccer"); Meta-World with it ("soccer-v3")."""
    task = TASK_ALIASES.get(task, task)
    return task if task.endswith("-v3") else f"{task}-v3"


def all_task_names() -> list[str]:
    """The 50 Meta-World v3 task names."""
    ALL_V3_ENVIRONMENTS = require("metaworld.env_dict", "metaworld", "the Meta-World environment").ALL_V3_ENVIRONMENTS

    return list(ALL_V3_ENVIRONMENTS)


def make_raw(task: str, seed: int | None = 0) -> Any:
    """The raw Meta-World env the adapter wraps (goal observable, 39-d state): the anchor for tests and benchmarks."""
    from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

    return ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE[f"{_canonical(task)}-goal-observable"](seed=seed)


@dataclass
class MetaWorldConfig:
    """Options of :class:`MetaWorldEnv` (``make_env("metaworld", **options)``)."""

    task: str = "reach-v3"
    """One of the 50 MT50 task names, with or without the ``-v3`` suffix."""
    seed: int | None = 0
    """Seed of the env's generator (layouts) and of its action space; None = unseeded."""
    randomize: bool = True
    """Domain randomisation: a new object/goal layout at every reset (else one fixed layout)."""
    one_hot_tasks: tuple[str, ...] = field(default_factory=lambda: MT10_TASKS + NOVEL_TASKS)
    """Task list the one-hot is taken over (its length is the one-hot width)."""
    zero_task_embedding: bool = False
    """Zero the one-hot (docs/design.md §3: novel tasks at deployment); required for tasks outside ``one_hot_tasks``."""
    max_episode_steps: int = MAX_EPISODE_STEPS
    """Episode length; ``done`` is True after this many steps."""
    terminate_on_success: bool = False
    """End the episode at the first step with ``info["success"]`` (default: run the full length)."""


class MetaWorldEnv(Env):
    """One Meta-World v3 task. See the module docstring for observation layout and seeding."""

    name = "metaworld"

    def __init__(self, config: MetaWorldConfig | None = None, **options: Any) -> None:
        super().__init__()
        cfg = config or MetaWorldConfig(**options)
        try:
            ENV_POLICY_MAP = require("metaworld.policies", "metaworld", "the Meta-World environment").ENV_POLICY_MAP
        except ImportError as exc:  # pragma: no cover - depends on the install
            from metacog_fast.envs.base import EnvSetupError

            raise EnvSetupError(f"{self.name} is not importable: {exc}") from exc
        task = _canonical(str(cfg.task))
        if task not in ENV_POLICY_MAP:
            raise ValueError(
                f"task: unknown Meta-World v3 task {cfg.task!r}; expected one of the 50 MT50 names, "
                f"e.g. {', '.join(MT10_TASKS[:4])} (see metacog_fast.metaworld.env.all_task_names())"
            )
        one_hot_tasks = tuple(_canonical(t) for t in cfg.one_hot_tasks)
        if not cfg.zero_task_embedding and task not in one_hot_tasks:
            raise ValueError(
                f"task: {task!r} is not in one_hot_tasks ({len(one_hot_tasks)} tasks); add it there or pass "
                "zero_task_embedding=True"
            )
        if cfg.max_episode_steps < 1 or cfg.max_episode_steps > MAX_EPISODE_STEPS:
            raise ValueError(f"max_episode_steps: expected 1..{MAX_EPISODE_STEPS}, got {cfg.max_episode_steps}")
        self.config = cfg
        self.task = task
        self.one_hot_tasks = one_hot_tasks
        self.raw = make_raw(task, cfg.seed)
        # The goal-observable class freezes the layout drawn at construction; unfreeze it for
        # domain randomisation and draw from the env's own seeded generator (reproducible).
        self.raw._freeze_rand_vec = not cfg.randomize
        self.raw.seeded_rand_vec = cfg.seed is not None
        self.raw.max_path_length = MAX_EPISODE_STEPS
        self._policy = ENV_POLICY_MAP[task]()
        self._one_hot = np.zeros(len(one_hot_tasks), dtype=np.float32)
        if not cfg.zero_task_embedding:
            self._one_hot[one_hot_tasks.index(task)] = 1.0
        self._obs_buf = np.zeros(STATE_DIM + len(one_hot_tasks), dtype=np.float32)
        self._obs_buf[STATE_DIM:] = self._one_hot
        self._state: np.ndarray = np.zeros(STATE_DIM)
        self._t = 0
        self._succeeded = False

    @property
    def observation_dim(self) -> int:
        return STATE_DIM + len(self.one_hot_tasks)

    @property
    def state(self) -> np.ndarray:
        """The raw 39-d Meta-World state ``[39]`` (float64) of the current step."""
        return self._state

    def _observe(self, state: np.ndarray) -> np.ndarray:
        self._state = state
        obs = self._obs_buf.copy()
        obs[:STATE_DIM] = state
        return obs

    def _reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """``seed``: reseed the layout generator before this reset (else continue its sequence)."""
        if seed is not None:
            self.raw.seed(int(seed))
            self.raw.seeded_rand_vec = True
        state, _ = self.raw.reset()
        self._t = 0
        self._succeeded = False
        info = {"task": self.task, "admissible": None, "success": False, "goal": np.array(self.raw._target_pos)}
        return self._observe(state), info

    def _step(self, action: Any) -> tuple[np.ndarray, float, bool, dict[str, Any]]:
        a = np.asarray(action, dtype=np.float32)
        if a.shape != (ACTION_DIM,):
            raise ValueError(f"action: expected shape ({ACTION_DIM},) in [-1, 1], got shape {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError(f"action: expected finite values in [-1, 1], got {a.tolist()}")
        state, reward, _terminated, _truncated, raw_info = self.raw.step(np.clip(a, -1.0, 1.0))
        self._t += 1
        success = bool(raw_info["success"])
        self._succeeded |= success
        done = self._t >= self.config.max_episode_steps or (self.config.terminate_on_success and success)
        info = dict(raw_info)
        info["success"] = success
        info["ever_success"] = self._succeeded
        info["steps"] = self._t
        return self._observe(state), float(reward), done, info

    def expert(self) -> np.ndarray:
        """Meta-World's scripted policy action ``[4]`` (float32, clipped to [-1, 1]) for the current state."""
        # The scripted policies warn on every large proportional gain; the action is clipped anyway.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Constant\(s\) may be too high")
            action = self._policy.get_action(self._state)
        return np.clip(action, -1.0, 1.0).astype(np.float32)

    def close(self) -> None:
        self.raw.close()


def probe(deep: bool = False) -> ProbeResult:
    """Whether this environment runs here (``metacog info``); ``deep`` also resets one episode."""
    details: dict[str, Any] = {"metaworld": package_version("metaworld"), "mujoco": package_version("mujoco")}
    details["tasks"] = len(all_task_names())
    if deep:
        env = MetaWorldEnv(task=MT10_TASKS[0])
        obs, _ = env.reset()
        env.step(env.expert())
        details["observation_dim"] = int(obs.shape[0])
        env.close()
    return ProbeResult("metaworld", True, "imports" + (", reset and step" if deep else ""), details)
