"""One run end to end (simulate, interview, judge, save run.json + evaluation.json +
viewer.html) and the ablation over module sets (3 runs per configuration), each run a task of
the one harness (``metacog_fast.runs``, docs/runs.md): resumable, on any executor."""
from __future__ import annotations

import json
import os
import statistics
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from metacog_fast._atomic import atomic_open

from metacog_fast.town.generative import AgentConfig, Features
from metacog_fast.runs import ExecutorConfig, Record, RunFolder, SideFile, Task, run_tasks
from metacog_fast.town.engine import SimConfig, Simulation, write_json
from metacog_fast.town.evaluation import (CRITERIA, METRIC_ANSWERS, culprit_named, expected_rating, informed_attendance,
                                          interview, judge)
from metacog_fast.town.llm_adapter import SimLLM
from metacog_fast.town.loader import load_scenario
from metacog_fast.town.viewer import write_viewer

if TYPE_CHECKING:
    from metacog_fast.llm.grounding import TextEncoder

CONFIGS: dict[str, Features] = {
    "all": Features(True, True, True, True),
    "no_metacognition": Features(True, True, True, False),
    "memory_only": Features(True, False, False, False),
    "no_memory": Features(False, False, False, True),
    "none": Features(False, False, False, False),
}
"""Named module sets for the ablation (paper 001 Figure 5)."""
DEFAULT_ABLATION = ("all", "no_metacognition", "memory_only")


@dataclass
class RunOptions:
    """What to simulate."""

    scenario: str = "zombie"
    """Built-in name (zombie, party, mystery) or a scenario .json path."""
    world: str | None = None
    """Built-in world name or path (None = the scenario's)."""
    agents: int | None = None
    """Number of agents (None = the scenario's num_agents)."""
    steps: int | None = None
    """Steps (None = the scenario's)."""
    seed: int | None = None
    """Seed (None = the scenario's)."""
    step_budget: float | None = None
    """Seconds per step for the thinking phase (None = unlimited)."""
    max_llm_calls: int | None = None
    """LLM calls per run (None = unlimited)."""
    judge: bool = True
    """Run interviews and the LLM judge after the simulation."""

    def validate(self) -> "RunOptions":
        """Raises ValueError naming the first field out of range (before any model or file opens)."""
        for name in ("agents", "steps", "max_llm_calls"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name}: expected an int >= 1 or none, got {v!r}")
        if self.step_budget is not None and not self.step_budget > 0:
            raise ValueError(f"step_budget: expected seconds > 0 or none, got {self.step_budget!r}")
        if not isinstance(self.scenario, str) or not self.scenario:
            raise ValueError(f"scenario: expected a built-in name or a .json path, got {self.scenario!r}")
        return self


@dataclass
class AblationOptions:
    """The module sets an ablation compares and how many runs each gets."""

    configs: tuple[str, ...] = DEFAULT_ABLATION
    """Module sets (``sim.runner.CONFIGS``): all, no_metacognition, memory_only, no_memory, none."""
    runs: int = 3
    """Runs per configuration (seeds seed .. seed+runs-1)."""

    def validate(self) -> "AblationOptions":
        unknown = [c for c in self.configs if c not in CONFIGS]
        if unknown or not self.configs:
            raise ValueError(f"configs: expected some of {', '.join(CONFIGS)}, got {list(self.configs)}")
        if self.runs < 1:
            raise ValueError(f"runs: expected >= 1, got {self.runs}")
        return self


def open_resources(llm_uri: str | None = None, n_threads: int | None = None) -> tuple[SimLLM, Any]:
    """The LLM (``metacog_fast.llm.open_llm``) and the MiniLM encoder (offline)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from metacog_fast.llm import open_llm
    from metacog_fast.llm.uri import is_embedded
    from metacog_fast.scoring.encoder import MiniLMEncoder

    embedded = is_embedded(llm_uri)
    opts: dict[str, Any] = {"n_threads": n_threads} if n_threads and embedded else {}
    if embedded:  # a stream for each agent of a 25-agent town; town prompts are a few hundred tokens
        opts.update(batch_n_seq_max=32, batch_n_ctx_seq=1024)
    # batched: each round of the agents' calls goes to the backend as one choose_many / generate_many
    return SimLLM(open_llm(llm_uri, **opts), batched=True), MiniLMEncoder()


def open_judge(judge_uri: str | None, n_threads: int | None = None) -> SimLLM | None:
    """The judge's own LLM (None when the agents' model judges)."""
    if judge_uri is None:
        return None
    from metacog_fast.llm import open_llm
    from metacog_fast.llm.uri import is_embedded

    opts: dict[str, Any] = {"n_threads": n_threads} if n_threads and is_embedded(judge_uri) else {}
    return SimLLM(open_llm(judge_uri, **opts))


def run_once(opts: RunOptions, features: Features, out_dir: str, llm: SimLLM, encoder: TextEncoder,
             agent_config: AgentConfig | None = None, progress: Any = None,
             judge_llm: SimLLM | None = None) -> dict[str, Any]:
    """Simulate one run and evaluate it; returns the summary (also written to ``summary.json``).
    ``judge_llm``: the judge's model (None: ``llm`` judges)."""
    opts.validate()
    sc = load_scenario(opts.scenario, opts.world, seed=opts.seed, n_agents=opts.agents, steps=opts.steps)
    cfg = SimConfig(features=features, agent=agent_config or AgentConfig(), step_budget=opts.step_budget,
                    max_llm_calls=opts.max_llm_calls)
    t0 = time.perf_counter()
    sim = Simulation(sc, llm, encoder, out_dir, cfg)
    try:
        sim.run(progress=progress)
        sim_seconds = time.perf_counter() - t0
        run_cost = llm.cost.as_dict()
        # without the judge, only the questions a scenario metric reads (the culprit question)
        answers = interview(sim) if opts.judge else interview(sim, METRIC_ANSWERS)
        metrics = sim.metrics()
        metrics["llm_cost"] = run_cost
        if sc.rules["type"] == "mystery":
            metrics["culprit"] = culprit_named(answers, sc.rules["murderer"])
        path = sim.save(extra={"interviews": answers})
    finally:
        sim.close()
    with open(path, encoding="utf-8") as f:
        run = json.load(f)
    run["metrics"] = metrics
    write_json(path, run)
    evaluation: dict[str, Any] = {"interviews": answers}
    judge_cost: dict[str, Any] = {}
    if opts.judge:
        if judge_llm is None:
            evaluation["judge"] = judge(llm, run, answers)
        else:
            before = judge_llm.cost.as_dict()
            evaluation["judge"] = judge(judge_llm, run, answers)
            judge_cost = {k: v - before.get(k, 0) for k, v in judge_llm.cost.as_dict().items()
                          if isinstance(v, (int, float))}
        evaluation["judge_model"] = _model_name(judge_llm or llm)
    write_json(os.path.join(out_dir, "evaluation.json"), evaluation)
    write_viewer(run, os.path.join(out_dir, "viewer.html"))
    summary = {
        "scenario": sc.name, "features": features.label(), "seed": sc.seed, "agents": len(sc.agents),
        "steps": metrics["steps"], "metrics": metrics, "sim_seconds": round(sim_seconds, 2),
        "judge": {k: v["score"] for k, v in evaluation.get("judge", {}).items() if k != "mean"},
        "judge_mean": evaluation.get("judge", {}).get("mean"),
        "judge_expected": _expected_mean(evaluation),
        "eval_cost": {k: v - run_cost.get(k, 0) for k, v in llm.cost.as_dict().items() if isinstance(v, (int, float))},
    }
    if opts.judge:
        summary["judge_model"] = evaluation["judge_model"]
    if judge_cost:
        summary["judge_cost"] = judge_cost
    write_json(os.path.join(out_dir, "summary.json"), summary)
    return summary


def _model_name(llm: SimLLM) -> str:
    """What rated a run: the backend's URI (a llama.cpp model's file name, a server's URL), its served
    model name and LoRA adapter where it has them."""
    inner = llm.llm
    uri, model, lora = getattr(inner, "uri", None), getattr(inner, "model", None), getattr(inner, "lora_path", None)
    if uri is None:
        return type(inner).__name__
    if uri.startswith("llama-cpp://"):
        uri = "llama-cpp://" + os.path.basename(uri[len("llama-cpp://"):])
    return str(uri) + (f" ({model})" if isinstance(model, str) else "") + (
        f" + {os.path.basename(str(lora))}" if lora else "")


def _expected_mean(evaluation: dict[str, Any]) -> float | None:
    j = evaluation.get("judge", {})
    vals = [expected_rating(j[c]["logprobs"]) for c in CRITERIA if c in j and j[c].get("logprobs")]
    return round(sum(vals) / len(vals), 4) if vals else None


def reaggregate(out_dir: str, configs: tuple[str, ...] = DEFAULT_ABLATION) -> dict[str, Any]:
    """Rebuild ablation.json/.md from the run folders ``<config>_run<i>`` found in ``out_dir``
    (summary.json + evaluation.json of each); used by ``sim report`` on an ablation folder and to
    add statistics computed from saved judge logprobs."""
    results: dict[str, list[dict[str, Any]]] = {}
    meta: dict[str, Any] = {}
    for name in configs:
        i = 0
        while os.path.isfile(os.path.join(out_dir, f"{name}_run{i}", "summary.json")):
            d = os.path.join(out_dir, f"{name}_run{i}")
            with open(os.path.join(d, "summary.json"), encoding="utf-8") as f:
                s = json.load(f)
            m, run_json = s["metrics"], os.path.join(d, "run.json")
            if "attendance_rate" in m and "attendance_informed_rate" not in m and os.path.isfile(run_json):
                with open(run_json, encoding="utf-8") as f:  # a record from before the metric existed
                    m["attendance_informed"] = informed_attendance(json.load(f))
                m["attendance_informed_rate"] = len(m["attendance_informed"]) / max(1, int(m["agents"]) - 1)
            ev = os.path.join(d, "evaluation.json")
            if os.path.isfile(ev):
                with open(ev, encoding="utf-8") as f:
                    s["judge_expected"] = _expected_mean(json.load(f))
            results.setdefault(name, []).append(s)
            meta = {"scenario": s["scenario"], "agents": s["agents"], "steps": s["steps"]}
            i += 1
    if not results:
        raise FileNotFoundError(f"{out_dir}: no <config>_run<i>/summary.json for configs {list(configs)}")
    runs = min(len(v) for v in results.values())
    doc = {**meta, "runs": runs, "configs": {n: CONFIGS[n].label() for n in results},
           "table": {n: aggregate(rs) for n, rs in results.items()}, "runs_detail": results}
    _write_ablation(out_dir, doc)
    return doc


def _write_ablation(out_dir: str, doc: dict[str, Any]) -> None:
    """ablation.json and ablation.md, both with the rates' Wilson intervals and every pair of
    configurations compared, paired by seed (:func:`metacog_fast.town.evaluation.ablation_statistics`),
    and ablation.png, the rates and judge scores with their intervals."""
    from metacog_fast.town.evaluation import (ablation_statistics, ablation_statistics_markdown,
                                             plot_ablation_statistics)

    doc["statistics"] = ablation_statistics(doc["runs_detail"])
    write_json(os.path.join(out_dir, "ablation.json"), doc)
    with atomic_open(os.path.join(out_dir, "ablation.md"), "w") as f:
        f.write(markdown_table(doc) + ablation_statistics_markdown(doc["statistics"]))
    plot_ablation_statistics(doc["statistics"], os.path.join(out_dir, "ablation.png"),
                             f"{doc.get('scenario', '')}: {doc.get('runs', '?')} seeds x {doc.get('steps', '?')} steps")


def summary_key(name: str, r: int) -> str:
    """The harness key of an ablation run's summary (``<config>_run<r>/summary.json``)."""
    return f"{name}_run{r}/summary"


def play_ablation_run(payload: dict[str, Any], done: Mapping[str, Any], workdir: Path) -> Iterator[Record | SideFile]:
    """Task function (``metacog_fast.runs``): one ablation run in ``workdir/<config>_run<r>``; its
    files (run.json, evaluation.json, viewer.html, the memory store) go back to the run folder,
    then its summary as the record."""
    name, r = payload["name"], payload["run"]
    sub = f"{name}_run{r}"
    llm, encoder, judge_llm = payload.get("llm"), payload.get("encoder"), payload.get("judge_llm")
    own = llm is None
    if own:
        llm, encoder = open_resources(payload.get("llm_uri"), payload.get("n_threads"))
        judge_llm = open_judge(payload.get("judge_uri"), payload.get("n_threads"))
    try:
        s = run_once(payload["opts"], CONFIGS[name], str(workdir / sub), llm, encoder, payload["agent_config"],
                     judge_llm=judge_llm)
    finally:
        if own:
            llm.llm.close()
            if judge_llm is not None:
                judge_llm.llm.close()
    yield from (f for f in SideFile.collect(workdir, sub) if f.path != f"{sub}/summary.json")
    yield Record(summary_key(name, r), s)


def scenario_seed(opts: RunOptions) -> int:
    """The seed the runs of an ablation count from: ``opts.seed``, else the scenario file's own. The
    scenario is loaded with the run's agent count, since a scenario's rules may name its agents (the
    mystery's detective and culprit)."""
    if opts.seed is not None:
        return opts.seed
    return load_scenario(opts.scenario, opts.world, n_agents=opts.agents).seed


def ablate(opts: RunOptions, out_dir: str, llm: SimLLM | None, encoder: TextEncoder | None,
           ablation: AblationOptions | None = None, agent_config: AgentConfig | None = None,
           log: Any = print, executor: ExecutorConfig | None = None, llm_uri: str | None = None,
           n_threads: int | None = None, judge_llm: SimLLM | None = None,
           judge_uri: str | None = None) -> dict[str, Any]:
    """``ablation.runs`` runs (seeds seed, seed+1, ...) of each module set of ``ablation.configs``;
    writes ablation.json/.md. Resumable: a run whose summary.json exists is not played again (the
    folder's config.json must match ``opts`` and ``agent_config``). ``llm``/``encoder``: objects
    used in this process; None: each run opens ``llm_uri`` (``n_threads``) itself, which any
    ``executor`` can run. ``judge_uri``: the judge's model (None: the agents' model judges), opened
    by each run, or ``judge_llm`` in this process; recorded in the folder's model identity."""
    opts.validate()
    ab = (ablation or AblationOptions()).validate()
    configs, runs = tuple(ab.configs), ab.runs
    if (llm is None) != (encoder is None):
        raise ValueError("llm, encoder: give both (runs in this process) or neither (each run opens its own)")
    ac = agent_config or AgentConfig()
    ex = executor or ExecutorConfig()
    if llm is not None:
        if ex.executor not in ("local", "inline"):
            raise ValueError(f"llm: LLM objects run in this process only; pass llm=None, encoder=None and "
                             f"llm_uri to run on executor {ex.executor!r}")
        ex = replace(ex, executor="inline")
    base_seed = scenario_seed(opts)
    from metacog_fast.llm.models import models_identity

    roles = {"llm": llm_uri} if judge_uri is None else {"llm": llm_uri, "judge": judge_uri}
    folder = RunFolder(out_dir, {"opts": asdict(opts), "agent_config": asdict(ac)},
                       identity=models_identity(**roles) if llm is None or judge_uri is not None else None)
    tasks = []
    for name in configs:
        for r in range(runs):
            payload = {"name": name, "run": r, "opts": replace(opts, seed=base_seed + r), "agent_config": ac,
                       "llm": llm, "encoder": encoder, "llm_uri": llm_uri, "n_threads": n_threads,
                       "judge_llm": judge_llm, "judge_uri": judge_uri}
            tasks.append(Task(f"{name}_run{r}", payload, (summary_key(name, r),)))

    def report_run(key: str, s: dict[str, Any]) -> None:
        log(f"[ablate] {key.rsplit('/', 1)[0]}: alive {s['metrics']['alive']}/{s['agents']}, judge {s['judge_mean']}, "
            f"LLM calls {s['metrics']['llm_cost']['calls']}, simulated in {s['sim_seconds']:.0f} s")

    run_tasks(folder, tasks, play_ablation_run, ex, desc="sim/ablate", on_record=report_run)
    results: dict[str, list[dict[str, Any]]] = {name: [folder.read(summary_key(name, r)) for r in range(runs)]
                                                for name in configs}
    table = {name: aggregate(rs) for name, rs in results.items()}
    n_agents = opts.agents if opts.agents is not None else results[configs[0]][0]["agents"]  # the scenario's own
    doc = {"scenario": opts.scenario, "agents": n_agents, "steps": opts.steps, "runs": runs,
           "configs": {n: CONFIGS[n].label() for n in configs}, "table": table, "runs_detail": results}
    _write_ablation(out_dir, doc)
    return doc


def _ms(xs: list[float]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(xs), 3), "std": round(statistics.pstdev(xs), 3) if len(xs) > 1 else 0.0}


def aggregate(rs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean and std over runs of the scenario metric, judge scores and LLM cost."""
    out: dict[str, Any] = {"runs": len(rs)}
    m0 = rs[0]["metrics"]
    for key in ("survival_rate", "attendance_rate"):
        if key in m0:
            out[key] = _ms([r["metrics"][key] for r in rs])
    if "culprit" in m0:
        out["culprit_rate"] = _ms([r["metrics"]["culprit"]["rate"] for r in rs])
        probs = [r["metrics"]["culprit"]["probability"] for r in rs if "probability" in r["metrics"]["culprit"]]
        if probs:
            out["culprit_probability"] = _ms(probs)
    for c in CRITERIA:
        vals = [r["judge"].get(c) for r in rs if r["judge"].get(c) is not None]
        if vals:
            out[f"judge_{c}"] = _ms(vals)
    exp = [r["judge_expected"] for r in rs if r.get("judge_expected") is not None]
    if exp:
        out["judge_expected_mean"] = _ms(exp)
    jm = [r["judge_mean"] for r in rs if r["judge_mean"] is not None]
    if jm:
        out["judge_mean"] = _ms(jm)
    out["llm_calls"] = _ms([r["metrics"]["llm_cost"]["calls"] for r in rs])
    out["llm_tokens"] = _ms([r["metrics"]["llm_cost"]["prompt_tokens"] + r["metrics"]["llm_cost"]["completion_tokens"]
                             for r in rs])
    out["llm_seconds"] = _ms([r["metrics"]["llm_cost"]["seconds"] for r in rs])
    out["meta_cognize_runs"] = _ms([r["metrics"]["meta_cognize_runs"] for r in rs])
    out["sim_seconds"] = _ms([r["sim_seconds"] for r in rs])
    return out


def markdown_table(doc: dict[str, Any]) -> str:
    cols = [k for k in next(iter(doc["table"].values())) if k != "runs"]
    lines = [f"# Ablation: {doc['scenario']} ({doc['agents']} agents, {doc['steps']} steps; mean ± std over runs)", "",
             "| config | modules | runs | " + " | ".join(cols) + " |", "|---|---|---|" + "---|" * len(cols)]
    for name, row in doc["table"].items():
        cells = [f"{row[c]['mean']:.3g} ± {row[c]['std']:.2g}" if c in row else "-" for c in cols]
        lines.append(f"| {name} | {doc['configs'][name]} | {row['runs']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
