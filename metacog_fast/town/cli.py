"""``metacog sim``, ``metacog sim ablate``, ``metacog sim report <run>``: the town simulation.

    metacog sim --scenario zombie --agents 3 --steps 10 --out runs/z1
    metacog sim ablate --scenario zombie --agents 3 --steps 6 --runs 3 --out results/sim
    metacog sim report runs/z1

Each command line is a dataclass read by tyro (:mod:`metacog_fast.cli.dataclass_args`): views of
:class:`~metacog_fast.town.runner.RunOptions` (what to simulate), :class:`~metacog_fast.town.jobs.SimLLMOptions`,
the generative :class:`~metacog_fast.town.generative.AgentConfig`, :class:`~metacog_fast.town.generative.Features`
(``--no-memory`` ... switch a module off), :class:`~metacog_fast.town.jobs.AblationOptions` and, for
the ablation's runs, :class:`~metacog_fast.runs.ExecutorConfig` (one run of ``metacog sim`` runs here).
Flags given before ``ablate`` count for it (``metacog sim --agents 3 ablate``).
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass

from metacog_fast.cli import checks
from metacog_fast.cli.dataclass_args import add_command, build, parse, view
from metacog_fast.cli.executor import ExecutorWorkersFlags
from metacog_fast.town.generative import AgentConfig, Features
from metacog_fast.town.jobs import AblationOptions, SimLLMOptions
from metacog_fast.town.runner import RunOptions



def _positive_budget(value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"expected seconds > 0 or none, got {value!r}")


def scenario_loads(opts: RunOptions) -> None:
    """The scenario and world load and take the agent and step counts (JSON read and checked, no model
    opened): checked before the run folder is written."""
    from metacog_fast.town.loader import load_scenario

    try:
        load_scenario(opts.scenario, opts.world, seed=opts.seed, n_agents=opts.agents, steps=opts.steps)
    except (ValueError, FileNotFoundError) as e:
        field = "world" if str(e).startswith("world") else "scenario"
        raise ValueError(f"{field}: {e}") from None


RunFlags = view(RunOptions, checks={"agents": checks.optional_positive_int, "steps": checks.optional_positive_int,
                                    "max_llm_calls": checks.optional_positive_int, "step_budget": _positive_budget},
                check=scenario_loads)
"""What to simulate (``sim`` and ``sim ablate``)."""
LLMFlags = view(SimLLMOptions, checks={"llm": checks.llm_uri, "judge_llm": checks.llm_uri,
                                       "llm_threads": checks.optional_positive_int})
AgentFlags = view(AgentConfig)
FeatureFlags = view(Features)
"""The cognitive modules of one run (``--no-memory``, ``--no-reflection``, ``--no-planning``, ``--no-metacognition``)."""
AblationFlags = view(AblationOptions)
"""``sim ablate``: module sets and runs per set."""


@dataclass
class SimCommand:
    """Town simulation of generative agents with metacognition (paper 001); sub-commands: ablate, report."""

    run: RunFlags
    llm: LLMFlags
    agent: AgentFlags
    features: FeatureFlags
    out: str = "runs/sim"
    """Run folder (run.json, evaluation.json, viewer.html)."""


@dataclass
class AblateCommand:
    """Runs per module set (default: all, no_metacognition, memory_only)."""

    run: RunFlags
    llm: LLMFlags
    agent: AgentFlags
    ablation: AblationFlags
    executor: ExecutorWorkersFlags
    out: str = "results/sim"
    """Ablation folder."""


def _run(a: argparse.Namespace) -> int:
    from metacog_fast.town.jobs import simulate

    cmd = parse(a, SimCommand)
    opts, llm_opts, agent, features = build(cmd.run), build(cmd.llm), build(cmd.agent), build(cmd.features)
    s = simulate(opts, features, cmd.out, llm_opts, agent)
    print(json.dumps({k: s[k] for k in ("scenario", "features", "steps", "judge_mean")}, indent=1))
    print(f"viewer: {os.path.join(cmd.out, 'viewer.html')}")
    return 0


def _ablate(a: argparse.Namespace) -> int:
    from metacog_fast.town.jobs import run_ablation

    cmd = parse(a, AblateCommand)
    opts, llm_opts, agent = build(cmd.run), build(cmd.llm), build(cmd.agent)
    ablation, executor = build(cmd.ablation), build(cmd.executor)
    doc = run_ablation(opts, ablation, cmd.out, llm_opts, agent, executor=executor)
    with open(os.path.join(cmd.out, "ablation.md"), encoding="utf-8") as f:
        print(f.read())
    return 0 if doc["table"] else 1


def _report(a: argparse.Namespace) -> int:
    from metacog_fast.town.jobs import report

    print(report(a.run))
    return 0


def attach(sim: argparse.ArgumentParser) -> None:
    """Fills ``metacog sim`` (with ``ablate`` and ``report``)."""
    add_command(sim, SimCommand)
    sim.set_defaults(func=_run)
    sub = sim.add_subparsers(dest="sim_cmd", metavar="{ablate,report}")
    ab = sub.add_parser("ablate", help="runs per module set (default: all, no_metacognition, memory_only)",
                        add_help=False)
    add_command(ab, AblateCommand)
    ab.set_defaults(func=_ablate)
    rep = sub.add_parser("report", help="summarise a run folder or an ablation folder; rewrite the viewer")
    rep.add_argument("run", help="run folder, run.json, or ablation folder")
    rep.set_defaults(func=_report)
