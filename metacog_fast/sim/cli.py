"""Command line of the town simulation.

    python -m metacog_fast.sim.cli sim --scenario zombie --agents 3 --steps 10 --out runs/z1
    python -m metacog_fast.sim.cli sim ablate --scenario zombie --agents 3 --steps 6 --runs 3 --out results/sim
    python -m metacog_fast.sim.cli sim report runs/z1

``add_arguments(subparsers)`` adds the same ``sim`` command to another parser
(the ``metacog`` CLI); ``demo_part(out_dir)`` runs a tiny end-to-end simulation.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from metacog_fast.agents.generative import AgentConfig


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world", default=None, help="built-in world name (town) or world .json (default: the scenario's)")
    p.add_argument("--scenario", default="zombie", help="zombie | party | mystery | path to a scenario .json")
    p.add_argument("--agents", type=int, default=None, help="number of agents (default: the scenario's)")
    p.add_argument("--steps", type=int, default=None, help="simulation steps (default: the scenario's)")
    p.add_argument("--seed", type=int, default=None, help="seed (default: the scenario's)")
    p.add_argument("--llm", default=None, help="LLM URI (default: embedded SmolLM2 via llama.cpp; or http://host:port/v1)")
    p.add_argument("--llm-threads", type=int, default=None, help="threads of the embedded model")
    p.add_argument("--step-budget", type=float, default=None, help="seconds per step for the agents' LLM calls")
    p.add_argument("--max-llm-calls", type=int, default=None, help="LLM call budget per run")
    p.add_argument("--progress-every", type=int, default=AgentConfig.progress_every, help="steps between self-ratings")
    p.add_argument("--no-judge", action="store_true", help="skip interviews and the LLM judge")


def add_arguments(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``sim`` command (with ``ablate`` and ``report``) to ``subparsers``."""
    sim = subparsers.add_parser("sim", help="town simulation of generative agents with metacognition (paper 001)")
    _run_options(sim)
    sim.add_argument("--out", default="runs/sim", help="run folder (run.json, evaluation.json, viewer.html)")
    for flag in ("memory", "reflection", "planning", "metacognition"):
        sim.add_argument(f"--no-{flag}", action="store_true", help=f"switch the {flag} module off")
    sub = sim.add_subparsers(dest="sim_cmd")
    ab = sub.add_parser("ablate", help="3 runs per module set (all, no_metacognition, memory_only)")
    _run_options(ab)
    ab.add_argument("--configs", default="all,no_metacognition,memory_only",
                    help="comma-separated: all, no_metacognition, memory_only, no_memory, none")
    ab.add_argument("--runs", type=int, default=3, help="runs per configuration (seeds seed..seed+runs-1)")
    ab.add_argument("--out", default="results/sim", help="ablation folder")
    rep = sub.add_parser("report", help="summarise a run folder or an ablation folder; rewrite the viewer")
    rep.add_argument("run", help="run folder, run.json, or ablation folder")
    sim.set_defaults(func=main_sim)
    return sim


def _opts(args: argparse.Namespace) -> Any:
    from metacog_fast.sim.runner import RunOptions

    return RunOptions(scenario=args.scenario, world=args.world, agents=args.agents, steps=args.steps, seed=args.seed,
                      step_budget=args.step_budget, max_llm_calls=args.max_llm_calls, judge=not args.no_judge)


def main_sim(args: argparse.Namespace) -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if getattr(args, "sim_cmd", None) == "report":
        print(report(args.run))
        return 0
    from metacog_fast.agents.generative import Features
    from metacog_fast.sim.runner import ablate, open_resources, run_once

    llm, enc = open_resources(args.llm, args.llm_threads)
    acfg = AgentConfig(progress_every=args.progress_every)
    if getattr(args, "sim_cmd", None) == "ablate":
        doc = ablate(_opts(args), args.out, llm, enc, tuple(c for c in args.configs.split(",") if c), args.runs, acfg)
        print(open(os.path.join(args.out, "ablation.md"), encoding="utf-8").read())
        return 0 if doc["table"] else 1
    feats = Features(memory=not args.no_memory, reflection=not args.no_reflection, planning=not args.no_planning,
                     metacognition=not args.no_metacognition)

    def progress(sim: Any) -> None:
        alive = sum(a.alive for a in sim.agents)
        print(f"step {sim.step_no}: {alive}/{len(sim.agents)} alive, LLM calls {sim.llm.cost.calls}", flush=True)

    s = run_once(_opts(args), feats, args.out, llm, enc, acfg, progress=progress)
    print(json.dumps({k: s[k] for k in ("scenario", "features", "steps", "judge_mean")}, indent=1))
    print(f"viewer: {os.path.join(args.out, 'viewer.html')}")
    return 0


def report(path: str) -> str:
    """Text summary of a run (and a rewritten viewer.html) or of an ablation folder."""
    from metacog_fast.sim.viewer import write_viewer

    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "run.json")) and any(
            os.path.isfile(os.path.join(path, d, "summary.json")) for d in os.listdir(path)):
        from metacog_fast.sim.runner import CONFIGS, markdown_table, reaggregate

        present = tuple(c for c in CONFIGS if os.path.isfile(os.path.join(path, f"{c}_run0", "summary.json")))
        return markdown_table(reaggregate(path, present))
    run_path = os.path.join(path, "run.json") if os.path.isdir(path) else path
    if not os.path.isfile(run_path):
        raise FileNotFoundError(f"{path}: expected a run folder with run.json, a run.json, or an ablation folder")
    try:
        with open(run_path, encoding="utf-8") as f:
            run = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{run_path}: malformed JSON ({e.msg} at line {e.lineno})") from None
    folder = os.path.dirname(os.path.abspath(run_path))
    write_viewer(run, os.path.join(folder, "viewer.html"))
    m = run.get("metrics", {})
    lines = [f"scenario {run['scenario']['name']} seed {run['scenario']['seed']} features {run['config']['features']}",
             f"steps {m.get('steps')}, alive {m.get('alive')}/{m.get('agents')}, meta_cognize runs {m.get('meta_cognize_runs')}"]
    for key in ("survival_rate", "attendance_rate", "culprit", "llm_cost", "timing_ms"):
        if key in m:
            lines.append(f"{key}: {json.dumps(m[key])}")
    ev = os.path.join(folder, "evaluation.json")
    if os.path.isfile(ev):
        with open(ev, encoding="utf-8") as f:
            j = json.load(f).get("judge", {})
        lines.append("judge: " + ", ".join(f"{k}={v['score']}" for k, v in j.items() if k != "mean"))
    for a in run["agents"]:
        lines.append(f"- {a['name']} ({a['role']}, {'alive' if a['alive'] else 'dead'}): goal '{a['goal']}', "
                     f"strategy '{a['strategy']}', {len(a['questions'])} questions")
    lines.append(f"viewer: {os.path.join(folder, 'viewer.html')}")
    return "\n".join(lines)


def demo_part(out_dir: str, llm_uri: str | None = None, agents: int = 2, steps: int = 2) -> dict[str, Any]:
    """A tiny end-to-end zombie run (all modules, judge included) for the package demo; returns its summary."""
    from metacog_fast.agents.generative import Features
    from metacog_fast.sim.runner import RunOptions, open_resources, run_once

    llm, enc = open_resources(llm_uri)
    try:
        return run_once(RunOptions(scenario="zombie", agents=agents, steps=steps), Features(), out_dir, llm, enc,
                        AgentConfig(progress_every=1))
    finally:
        llm.llm.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m metacog_fast.sim.cli")
    add_arguments(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
