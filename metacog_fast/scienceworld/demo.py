"""``metacog demo --parts sw_agent``: one short episode of the full dual-process agent
(Swift ranker trained on the gold path of one train variation, Sage, AMM, SRM) on a real task."""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from metacog_fast.cli.demo_registry import (DemoPart, PositiveInt, ProgressFactory, csv_list, expert_summary, model_info,
                                              expert_policy, register_demo_part)
from metacog_fast.envs.base import Env
from metacog_fast.envs.driver import play


# -- the environment checked with its expert (runs under --quick) ----------------------------

@dataclass
class ScienceWorldDemo:
    """``--parts scienceworld``: tasks played by their gold paths."""

    tasks: str = "find-non-living-thing,identify-life-stages-1"
    """Comma-separated task names, ids or indices 0-29 (two short tasks)."""
    episodes: PositiveInt = 1
    """Variations per task."""
    split: str = "train"
    """Variation split."""


def _sw_run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.scienceworld.env import ScienceWorldEnv, ScienceWorldConfig, resolve_task

    tasks = [resolve_task(t) for t in csv_list(args.scienceworld_tasks)]
    if not tasks:
        raise ValueError("--scienceworld-tasks: expected at least one task")
    wall0 = time.perf_counter()
    episodes: list[dict[str, Any]] = []
    envs: list[Env] = []
    bar = progress(total=len(tasks) * args.scienceworld_episodes, desc="scienceworld")
    for task in tasks:
        env = ScienceWorldEnv(ScienceWorldConfig(task=task, split=args.scienceworld_split))
        envs.append(env)
        for _ in range(args.scienceworld_episodes):
            info = play(env, expert_policy(env), None, reset_kwargs={}).info
            episodes.append(
                {"task": task, "variation": info["variation"], "success": info["won"], "score": info["score"],
                 "steps": info["steps"], "errored": info["errored"], "reset_seconds": env.timings.last_reset_seconds}
            )
            bar.update(1)
            bar.set_postfix_str(f"{task}: score {info['score']:.0f}")
        env.close()
    bar.close()
    out = expert_summary(envs, episodes, time.perf_counter() - wall0, "ScienceWorld gold action paths")
    out["mean_score"] = sum(e["score"] for e in episodes) / len(episodes)
    return out


register_demo_part(DemoPart("scienceworld", "ScienceWorld tasks played by their gold paths", ScienceWorldDemo, _sw_run, needs=("scienceworld",), quick=True))


# -- the agent ---------------------------------------------------------------------------


@dataclass
class SwAgentDemo:
    """``--parts sw_agent``: one short episode of the dual-process agent."""

    task: str = "13"
    """Task index, id or name (13: find-plant)."""
    steps: int = 8
    """Step budget."""
    config: str = "full"
    """baseline|amm|srm|full."""


def _run(args: argparse.Namespace, progress: ProgressFactory) -> dict[str, Any]:
    from metacog_fast.scienceworld.agent import run_episode
    from metacog_fast.scienceworld.amm import AMM
    from metacog_fast.scienceworld.config import config_for
    from metacog_fast.scienceworld.runner import SIMULATOR_STEP_LIMIT, collect_gold
    from metacog_fast.scienceworld.swift import RankerSwift, train_ranker
    from metacog_fast.envs import make_env
    from metacog_fast.scienceworld.env import resolve_task
    from metacog_fast.llm import open_llm
    from metacog_fast.memory import MemoryStore

    if args.sw_agent_steps < 1:
        raise ValueError(f"--sw-agent-steps: expected >= 1, got {args.sw_agent_steps}")
    # a demo episode has the fixed length asked for, not the protocol's gold-path budget
    cfg = config_for(args.sw_agent_config, max_steps=args.sw_agent_steps, budget_factor=0.0)
    task = int(args.sw_agent_task) if str(args.sw_agent_task).isdigit() else args.sw_agent_task
    bar = progress(total=3, desc="sw_agent")
    t0 = time.perf_counter()
    model, stats = train_ranker(collect_gold(task, 1))
    bar.update(1)
    llm = open_llm(n_threads=1)
    env = make_env("scienceworld", task=task, split="test", step_limit=SIMULATOR_STEP_LIMIT)
    bar.update(1)
    try:
        with tempfile.TemporaryDirectory() as d:
            store = MemoryStore.open(os.path.join(d, "m.sqlite"), dim=384, synchronous="NORMAL", num_threads=1)
            amm = AMM(store, resolve_task(task), cfg.memory_k) if cfg.use_amm else None
            res = run_episode(env, cfg, RankerSwift(model), llm, env.variations[0], amm, args.sw_agent_config)
            store.close()
    finally:
        env.close()
        llm.close()
    bar.update(1)
    bar.close()
    m = res.mechanisms or {}
    model = model_info("Swift: a ranker fitted on the gold path of one train variation; Sage and Critic: the "
                       "embedded SmolLM2-135M", "trained in the demo",
                       f"ranker top-1 on its training path {stats.get('train_top1_sampled', float('nan')):.2f}; "
                       "one variation is far from the paper's imitation training, so read the trace, not the score")
    summary = (f"score {res.score:.0f}; Swift {m.get('swift_steps', 0)} steps, buffered plan {m.get('buffer_steps', 0)}, "
               f"Sage {m.get('sage_calls', 0)}x, Critic {m.get('critic_calls', 0)}x, memory writes {m.get('memory_writes', 0)}")
    return {"model": model, "summary": summary, "task": res.task, "variation": res.variation, "config": res.config, "score": res.score, "won": res.won,
            "steps": res.steps, "actions": res.actions, "sources": res.sources, "notes": res.notes, "mechanisms": res.mechanisms, "ranker": stats,
            "episodes": [{"task": res.task, "success": res.won, "steps": res.steps}], "n_episodes": 1,
            "success_rate": 1.0 if res.won else 0.0, "wall_seconds": time.perf_counter() - t0}


register_demo_part(DemoPart("sw_agent", "one short ScienceWorld episode of the full dual-process agent",
                            SwAgentDemo, _run, needs=("scienceworld",)))
