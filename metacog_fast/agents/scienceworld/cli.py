"""``metacog run scienceworld`` and ``metacog report scienceworld <run>``."""
from __future__ import annotations

import argparse
import json
from typing import Any

from metacog_fast.agents.scienceworld.config import CONFIG_NAMES


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    from metacog_fast.agents.scienceworld.runner import RunConfig

    d = RunConfig()
    p.add_argument("--config", default="all", help=f"one of {', '.join(CONFIG_NAMES)}, a comma list, or all (default)")
    p.add_argument("--tasks", default="0-29", help="task indices, e.g. 0-29 or 0,3,7 (default 0-29)")
    p.add_argument("--variations", type=int, default=d.variations, help=f"test variations per task (default {d.variations})")
    p.add_argument("--max-steps", type=int, default=d.max_steps,
                   help=f"agent actions per episode, the budget's floor (default {d.max_steps})")
    p.add_argument("--budget-factor", type=float, default=d.budget_factor,
                   help=f"budget = max(max-steps, budget-factor x gold path length); 0: flat max-steps "
                        f"(default {d.budget_factor})")
    p.add_argument("--warmup", type=int, default=d.warmup_per_task,
                   help=f"AMM warm-up episodes per task (default {d.warmup_per_task}; 2 x 30 tasks = 60)")
    p.add_argument("--train-variations", type=int, default=d.train_variations,
                   help=f"train variations per task whose gold paths train the ranker (default {d.train_variations})")
    p.add_argument("--swift", choices=("ranker", "llm"), default=d.swift, help="Swift proposer (default ranker)")
    p.add_argument("--memory-embed", choices=("hash", "minilm"), default=d.memory_embed, help="AMM embeddings")
    p.add_argument("--llm", default=None, help="LLM URI (default: $METACOG_LLM, then embedded SmolLM2)")
    p.add_argument("--n-threads", type=int, default=1, help="llama.cpp threads per worker (default 1)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default 1)")
    p.add_argument("--out", required=True, help="run folder (resumed when it exists)")


def run_cmd(a: argparse.Namespace) -> int:
    from metacog_fast.agents.scienceworld.runner import RunConfig, parse_tasks, run_protocol

    configs = list(CONFIG_NAMES) if a.config == "all" else [c.strip() for c in a.config.split(",") if c.strip()]
    cfg = RunConfig(configs=configs, tasks=parse_tasks(a.tasks), variations=a.variations, max_steps=a.max_steps,
                    budget_factor=a.budget_factor, train_variations=a.train_variations, warmup_per_task=a.warmup, swift=a.swift, workers=a.workers,
                    llm=a.llm, n_threads=a.n_threads, memory_embed=a.memory_embed).validate()
    print(json.dumps(run_protocol(a.out, cfg)))
    return 0


def report_cmd(a: argparse.Namespace) -> int:
    from metacog_fast.agents.scienceworld.report import report

    report(a.run, a.out, all_episodes=a.all_episodes)
    with open(f"{a.out or a.run}/tables.md") as f:
        print(f.read())
    return 0


def attach_run(sub: Any) -> None:
    """Adds ``scienceworld`` under ``metacog run``."""
    p = sub.add_parser("scienceworld", help="ScienceWorld dual-process agent (baseline/amm/srm/full)")
    add_run_arguments(p)
    p.set_defaults(func=run_cmd)


def attach_report(sub: Any) -> None:
    p = sub.add_parser("scienceworld", help="tables, mechanism counts and score chart of a ScienceWorld run")
    p.add_argument("run", help="run folder")
    p.add_argument("--out", default=None, help="output folder (default: the run)")
    p.add_argument("--all-episodes", action="store_true",
                   help="count every episode (default: only task/variations every configuration ran)")
    p.set_defaults(func=report_cmd)
