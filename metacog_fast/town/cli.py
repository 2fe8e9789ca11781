"""``metacog sim``, ``metacog sim ablate``, ``metacog sim report <run>``: the town simulation.

    metacog sim --scenario zombie --agents 3 --steps 10 --out runs/z1
    metacog sim ablate --scenario zombie --agents 3 --steps 6 --runs 3 --out results/sim
    metacog sim report runs/z1

Flags come from :class:`~metacog_fast.town.runner.RunOptions` (what to simulate),
:class:`~metacog_fast.town.jobs.SimLLMOptions`, the generative
:class:`~metacog_fast.town.generative.AgentConfig`, :class:`~metacog_fast.town.generative.Features`
(``--no-memory`` ... switch a module off), :class:`~metacog_fast.town.jobs.AblationOptions` and, for
the ablation's runs, :class:`~metacog_fast.runs.ExecutorConfig` (one run of ``metacog sim`` runs here).
"""
from __future__ import annotations

import argparse
import json
import os

from metacog_fast.town.generative import AgentConfig, Features
from metacog_fast.cli.dataclass_args import Flags, add_config_flags, config_from_args
from metacog_fast.cli.executor import EXECUTOR_WORKERS_FLAGS
from metacog_fast.town.jobs import AblationOptions, SimLLMOptions
from metacog_fast.town.runner import RunOptions

RUN_FLAGS = (Flags(RunOptions), Flags(SimLLMOptions), Flags(AgentConfig))
"""What to simulate, with which LLM, and the agents' settings (``sim`` and ``sim ablate``)."""
FEATURE_FLAGS = Flags(Features)
"""The cognitive modules of one run (``--no-memory``, ``--no-reflection``, ``--no-planning``, ``--no-metacognition``)."""
ABLATION_FLAGS = Flags(AblationOptions)
"""``sim ablate``: module sets and runs per set."""


def _run(a: argparse.Namespace) -> int:
    from metacog_fast.town.jobs import simulate

    opts, llm_opts, agent = (config_from_args(s, a) for s in RUN_FLAGS)
    s = simulate(opts, config_from_args(FEATURE_FLAGS, a), a.out, llm_opts, agent)
    print(json.dumps({k: s[k] for k in ("scenario", "features", "steps", "judge_mean")}, indent=1))
    print(f"viewer: {os.path.join(a.out, 'viewer.html')}")
    return 0


def _ablate(a: argparse.Namespace) -> int:
    from metacog_fast.town.jobs import run_ablation

    opts, llm_opts, agent = (config_from_args(s, a) for s in RUN_FLAGS)
    doc = run_ablation(opts, config_from_args(ABLATION_FLAGS, a), a.out, llm_opts, agent,
                       executor=config_from_args(EXECUTOR_WORKERS_FLAGS, a))
    with open(os.path.join(a.out, "ablation.md"), encoding="utf-8") as f:
        print(f.read())
    return 0 if doc["table"] else 1


def _report(a: argparse.Namespace) -> int:
    from metacog_fast.town.jobs import report

    print(report(a.run))
    return 0


def attach(sim: argparse.ArgumentParser) -> None:
    """Fills ``metacog sim`` (with ``ablate`` and ``report``)."""
    add_config_flags(sim, *RUN_FLAGS, FEATURE_FLAGS)
    sim.add_argument("--out", default="runs/sim", help="run folder (run.json, evaluation.json, viewer.html)")
    sim.set_defaults(func=_run)
    sub = sim.add_subparsers(dest="sim_cmd", metavar="{ablate,report}")
    ab = sub.add_parser("ablate", help="runs per module set (default: all, no_metacognition, memory_only)")
    add_config_flags(ab, *RUN_FLAGS, ABLATION_FLAGS, EXECUTOR_WORKERS_FLAGS)
    ab.add_argument("--out", default="results/sim", help="ablation folder")
    ab.set_defaults(func=_ablate)
    rep = sub.add_parser("report", help="summarise a run folder or an ablation folder; rewrite the viewer")
    rep.add_argument("run", help="run folder, run.json, or ablation folder")
    rep.set_defaults(func=_report)
