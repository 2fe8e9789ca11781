"""``metacog demo`` parts that run agents (``muse_wm``: MUSE-WM beside Dreamer-v3 on Meta-World).

Each wraps the agent module's own ``demo_part`` and is imported only when it runs.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

from metacog_fast.cli.demo_registry import (DemoPart, PositiveInt, ProgressFactory, expert_policy, expert_summary,
                                              model_info, register_demo_part)
from metacog_fast.envs.base import Env
from metacog_fast.envs.driver import play


# -- the environment checked with its expert (runs under --quick) ----------------------------

@dataclass
class MetaWorldDemo:
    """``--parts metaworld``: the scripted policy on the first MT10 tasks."""

    tasks: PositiveInt = 3
    """First N MT10 tasks."""
    episodes: PositiveInt = 1
    """Episodes per task."""
    steps: PositiveInt = 500
    """Steps per episode, <= 500."""


def _mw_run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.metaworld.env import MT10_TASKS, MetaWorldEnv, MetaWorldConfig

    tasks = list(MT10_TASKS[: args.metaworld_tasks])
    episodes: list[dict[str, Any]] = []
    wall0 = time.perf_counter()
    per_task: list[Env] = []
    bar = progress(total=len(tasks) * args.metaworld_episodes, desc="metaworld")
    for task in tasks:
        env = MetaWorldEnv(MetaWorldConfig(task=task, seed=args.seed, max_episode_steps=args.metaworld_steps))
        per_task.append(env)
        for ep in range(args.metaworld_episodes):
            played = play(env, expert_policy(env), None, reset_kwargs={})
            episodes.append(
                {"task": task, "episode": ep, "success": played.success, "steps_to_success": played.first_success,
                 "steps": played.info["steps"], "return": played.return_}
            )
            bar.update(1)
            bar.set_postfix_str(f"{task}: {'ok' if played.success else 'fail'}")
        env.close()
    bar.close()
    out = expert_summary(per_task, episodes, time.perf_counter() - wall0, "Meta-World scripted policies")
    out["tasks"] = tasks
    return out


register_demo_part(DemoPart("metaworld", "Meta-World scripted policy on the first MT10 tasks", MetaWorldDemo, _mw_run, needs=("metaworld",), quick=True))


# -- the agent ---------------------------------------------------------------------------


@dataclass
class MuseWmDemo:
    """``--parts muse_wm``: MUSE-WM beside Dreamer-v3 on one novel task."""

    task: str = "coffee-button-v3"
    """Novel Meta-World task."""
    steps: int = 100
    """Acting steps."""
    checkpoint: str | None = None
    """Pre-trained checkpoint (None: fresh XS weights)."""


def _muse_wm_run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.metaworld.train.demo import demo_part

    if args.muse_wm_steps < 1:
        raise ValueError(f"--muse-wm-steps: expected >= 1, got {args.muse_wm_steps}")
    bar = progress(total=1, desc="muse_wm")
    t0 = time.perf_counter()
    res = demo_part(task=args.muse_wm_task, steps=args.muse_wm_steps, checkpoint=args.muse_wm_checkpoint, seed=args.seed)
    bar.update(1)
    bar.close()
    d = res["dreamer"]
    if args.muse_wm_checkpoint:
        model = model_info(f"MUSE-WM / Dreamer-v3 from {args.muse_wm_checkpoint}", "shipped"
                           if "metacog_fast" in str(args.muse_wm_checkpoint) else "base model", "")
    else:
        model = model_info("MUSE-WM / Dreamer-v3, fresh XS weights", "untrained",
                           "no Meta-World weights ship yet (no run has learned a task on this CPU): the part "
                           "shows the control loop, its speed and its Σψ, not competence")
    return {
        **res,
        "model": model,
        "summary": (f"MUSE {res['decisions_per_second']:.0f} decisions/s, mean Σψ {res['mean_psi_sum']:.2f}; "
                    f"Dreamer-v3 {d['decisions_per_second']:.0f} decisions/s"),
        "episodes": [{"task": res["task"], "agent": "muse", "success": bool(res["success"]), "steps": res["steps"]},
                     {"task": res["task"], "agent": "dreamer", "success": bool(d["success"]), "steps": d["steps"]}],
        "n_episodes": 2,
        "success_rate": (bool(res["success"]) + bool(d["success"])) / 2,
        "wall_seconds": time.perf_counter() - t0,
    }


register_demo_part(
    DemoPart(
        "muse_wm",
        "MUSE-WM self-regulating beside Dreamer-v3 on one novel Meta-World task (decisions/s, Σψ)",
        MuseWmDemo,
        _muse_wm_run,
        needs=("metaworld",),
    )
)
