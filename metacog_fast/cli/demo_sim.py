"""``metacog demo --parts sim``: a tiny zombie-scenario run of the generative agents with
metacognition (all modules, interviews and judge included) on the embedded LLM."""
from __future__ import annotations

import argparse
import os
import time
from typing import Any

from metacog_fast.cli.demo_registry import DemoPart, ProgressFactory, register_demo_part


def _args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("sim (opt-in)")
    g.add_argument("--sim-agents", type=int, default=2, help="agents in the zombie town (default 2)")
    g.add_argument("--sim-steps", type=int, default=2, help="simulation steps (default 2)")


def _run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.sim.jobs import demo_part

    if args.sim_agents < 1 or args.sim_steps < 1:
        raise ValueError(f"--sim-agents/--sim-steps: expected >= 1, got {args.sim_agents}/{args.sim_steps}")
    out_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "sim")
    bar = progress(total=1, desc="sim")
    t0 = time.perf_counter()
    summary = demo_part(out_dir, agents=args.sim_agents, steps=args.sim_steps)
    bar.update(1)
    bar.close()
    return {**summary, "run_dir": out_dir, "viewer": os.path.join(out_dir, "viewer.html"),
            "wall_seconds": time.perf_counter() - t0}


register_demo_part(DemoPart("sim", "a tiny zombie-town run of generative agents with metacognition (opt-in)",
                            _args, _run, default=False))
