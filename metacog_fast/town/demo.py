"""``metacog demo --parts sim``: a few steps of the zombie scenario with every module of the
generative agents with metacognition, on the embedded LLM: each agent's plans, progress ratings and
metacognitive decisions (the interviews and the judge are left out: minutes on 2 cores)."""
from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from typing import Any

from metacog_fast.cli.demo_registry import DemoPart, ProgressFactory, model_info, register_demo_part


@dataclass
class SimDemo:
    """``--parts sim``: a few steps of the zombie town."""

    agents: int = 2
    """Agents in the zombie town."""
    steps: int = 3
    """Simulation steps."""


def _run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.town.jobs import demo_part

    if args.sim_agents < 1 or args.sim_steps < 1:
        raise ValueError(f"--sim-agents/--sim-steps: expected >= 1, got {args.sim_agents}/{args.sim_steps}")
    out_dir = os.path.join(os.path.dirname(os.path.abspath(args.out)), "sim")
    bar = progress(total=1, desc="sim")
    t0 = time.perf_counter()
    summary = demo_part(out_dir, agents=args.sim_agents, steps=args.sim_steps)
    bar.update(1)
    bar.close()
    m = summary.get("metrics", {})
    rated = [e for e in summary.get("timeline", []) if e.get("kind") == "progress"]
    model = model_info("the embedded SmolLM2-135M-Instruct", "base model",
                       "no town-specific weights exist; ratings are the expected value over the answers 1..10")
    brief = (f"{m.get('steps')} steps, {m.get('alive')}/{m.get('agents')} alive, {len(rated)} progress ratings, "
             f"meta_cognize {m.get('meta_cognize_runs')}x")
    return {**summary, "model": model, "summary": brief, "run_dir": out_dir, "viewer": os.path.join(out_dir, "viewer.html"),
            "wall_seconds": time.perf_counter() - t0}


register_demo_part(DemoPart("sim", "a few steps of the zombie town: generative agents rating their progress and "
                            "deciding when to rethink", SimDemo, _run))
