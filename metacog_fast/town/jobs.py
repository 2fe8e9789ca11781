"""What the ``metacog sim`` commands run, as plain functions of configuration dataclasses: one
simulation, an ablation over module sets, the text report of a run or an ablation folder, and the
tiny run of ``metacog demo``."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable

from metacog_fast.town.generative import AgentConfig, Features
from metacog_fast.runs.config import ExecutorConfig
from metacog_fast.town.runner import AblationOptions, RunOptions


@dataclass
class SimLLMOptions:
    """Which LLM the town's agents think with."""

    llm: str | None = None
    """LLM URI (None: the embedded SmolLM2 via llama.cpp; or http://host:port/v1)."""
    llm_threads: int | None = None
    """Threads of the embedded model (None: llama.cpp's choice)."""
    judge_llm: str | None = None
    """LLM URI of the judge that rates each run after it (None: the agents' own model). A stronger
    judge than the 135M agents, e.g. an OpenAI-compatible server, rates the same transcripts."""


def _progress_line(sim: Any) -> None:
    alive = sum(a.alive for a in sim.agents)
    print(f"step {sim.step_no}: {alive}/{len(sim.agents)} alive, LLM calls {sim.llm.cost.calls}", flush=True)


def simulate(opts: RunOptions, features: Features, out_dir: str, llm_opts: SimLLMOptions | None = None,
             agent_config: AgentConfig | None = None,
             progress: Callable[[Any], None] | None = _progress_line) -> dict[str, Any]:
    """One run into ``out_dir`` (run.json, evaluation.json, viewer.html); returns its summary."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from metacog_fast.town.runner import open_judge, open_resources, run_once

    lo = llm_opts or SimLLMOptions()
    llm, enc = open_resources(lo.llm, lo.llm_threads)
    judge = open_judge(lo.judge_llm, lo.llm_threads)
    try:
        return run_once(opts, features, out_dir, llm, enc, agent_config or AgentConfig(), progress=progress,
                        judge_llm=judge)
    finally:
        llm.llm.close()
        if judge is not None:
            judge.llm.close()


def run_ablation(opts: RunOptions, ablation: AblationOptions, out_dir: str, llm_opts: SimLLMOptions | None = None,
                 agent_config: AgentConfig | None = None, executor: ExecutorConfig | None = None) -> dict[str, Any]:
    """``ablation.runs`` runs of each module set into ``out_dir`` (ablation.json / .md); returns the
    document. In this process (one worker) the LLM and encoder are opened once for every run;
    on worker processes or Ray each run opens its own."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from metacog_fast.town.runner import ablate, open_judge, open_resources

    ablation.validate()
    lo = llm_opts or SimLLMOptions()
    ex = (executor or ExecutorConfig()).validate()
    ac = agent_config or AgentConfig()
    in_process = ex.executor == "inline" or (ex.executor == "local" and ex.resolved_workers(1) == 1)
    if not in_process:
        return ablate(opts, out_dir, None, None, ablation, ac, executor=ex, llm_uri=lo.llm, n_threads=lo.llm_threads,
                      judge_uri=lo.judge_llm)
    llm, enc = open_resources(lo.llm, lo.llm_threads)
    judge = open_judge(lo.judge_llm, lo.llm_threads)
    try:
        return ablate(opts, out_dir, llm, enc, ablation, ac, executor=ex, llm_uri=lo.llm, judge_llm=judge,
                      judge_uri=lo.judge_llm)
    finally:
        llm.llm.close()
        if judge is not None:
            judge.llm.close()


def report(path: str) -> str:
    """Text summary of a run (and a rewritten viewer.html) or of an ablation folder."""
    from metacog_fast.town.viewer import write_viewer

    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "run.json")) and any(
            os.path.isfile(os.path.join(path, d, "summary.json")) for d in os.listdir(path)):
        from metacog_fast.town.runner import CONFIGS, markdown_table, reaggregate

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


def demo_part(out_dir: str, llm_uri: str | None = None, agents: int = 2, steps: int = 3,
              judge: bool = False) -> dict[str, Any]:
    """A tiny zombie run with every module for the package demo (progress rated every step, so the
    metacognitive loop shows); returns its summary plus ``timeline``: every agent's plans, progress
    ratings and metacognitive decisions in step order. ``judge``: also the interviews and the LLM
    judge (minutes on 2 cores, so off in the demo)."""
    summary = simulate(RunOptions(scenario="zombie", agents=agents, steps=steps, judge=judge), Features(), out_dir,
                       SimLLMOptions(llm=llm_uri), AgentConfig(progress_every=1), progress=None)
    with open(os.path.join(out_dir, "run.json"), encoding="utf-8") as f:
        run = json.load(f)
    summary["timeline"] = run.get("log", [])
    return summary
