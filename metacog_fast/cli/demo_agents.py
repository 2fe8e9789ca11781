"""``metacog demo`` parts that run agents (``muse_wm``: MUSE-WM beside Dreamer-v3 on Meta-World).

Each wraps the agent module's own ``demo_part`` and is imported only when it runs.
"""
from __future__ import annotations

import argparse
import time
from typing import Any

from metacog_fast.cli.demo_registry import DemoPart, ProgressFactory, model_info, register_demo_part


def _muse_wm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("muse_wm")
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
        _muse_wm_args,
        _muse_wm_run,
        needs=("metaworld",),
    )
)
