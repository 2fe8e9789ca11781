"""``metacog demo`` parts that run agents (opt-in: ``--parts ...,muse_wm``).

Each wraps the agent module's own ``demo_part`` and is imported only when it runs.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

from metacog_fast.cli.demo_registry import DemoPart, ProgressFactory, register_demo_part


def _muse_wm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("muse_wm (opt-in)")
    g.add_argument("--muse-wm-task", default="coffee-button-v3", help="novel Meta-World task (default coffee-button-v3)")
    g.add_argument("--muse-wm-steps", type=int, default=100, help="acting steps (default 100)")
    g.add_argument("--muse-wm-checkpoint", default=None, help="pre-trained checkpoint (default: fresh XS weights)")


def _muse_wm_run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.train.demo import demo_part

    if args.muse_wm_steps < 1:
        raise ValueError(f"--muse-wm-steps: expected >= 1, got {args.muse_wm_steps}")
    bar = progress(total=1, desc="muse_wm")
    t0 = time.perf_counter()
    res = demo_part(task=args.muse_wm_task, steps=args.muse_wm_steps, checkpoint=args.muse_wm_checkpoint, seed=args.seed)
    bar.update(1)
    bar.close()
    return {
        **res,
        "episodes": [{"task": res["task"], "success": bool(res["success"]), "steps": res["steps"]}],
        "n_episodes": 1,
        "success_rate": 1.0 if res["success"] else 0.0,
        "wall_seconds": time.perf_counter() - t0,
    }


register_demo_part(
    DemoPart(
        "muse_wm",
        "MUSE-WM self-regulating on one novel Meta-World task (decisions/s; fresh weights unless a checkpoint)",
        _muse_wm_args,
        _muse_wm_run,
        default=False,
        needs=("metaworld",),
    )
)
