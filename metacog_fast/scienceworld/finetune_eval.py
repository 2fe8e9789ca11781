"""Swift agreement: top-1 agreement with the expert on held-out ``dev`` gold steps, for the learned
ranker and for LLMs as the LLM Swift (base and fine-tuned), with Wilson intervals and paired tests.

Each LLM is measured with each prefilter of its options: ``lexical`` (the shipped LLM Swift: the
lexical top-k) and ``ranker`` (the learned ranker's top-k, so the LLM re-ranks the ranker's
candidates). ``gold_in_options`` bounds what the LLM can reach with a prefilter.

Layout of an evaluation folder (resumable: a finished proposer is not measured again)::

    config.json                 SwiftAgreementConfig, the ranker's sha256
    states.json                 the sampled dev gold steps (task, variation, state, valid actions, gold)
    proposals/<proposer>.json   per step: the proposal, hit, gold among the options
    agreement.json              per proposer: top-1 (Wilson 95 %), gold in options, ms per step;
                                paired exact McNemar tests of every LLM proposer against the ranker
                                and of each fine-tuned LLM against the base with the same prefilter
"""
from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from metacog_fast.runs.records import read_json, write_json_atomic
from metacog_fast.scienceworld.swift import PREFILTERS, GoldExample
from metacog_fast.finetune.base import sha256_file

BASE = "base"
"""The name of the base model (the shipped SmolLM2-135M) in ``SwiftAgreementConfig.llms``."""


@dataclass
class SwiftAgreementConfig:
    """Which Swift proposers are measured on which held-out dev gold steps."""

    llms: tuple[str, ...] = (BASE, "finetuned:scienceworld")
    """LLMs measured as the LLM Swift: "base" (the shipped SmolLM2-135M) or any LLM URI
    (finetuned:NAME, llama-cpp:///path/to/export)."""
    prefilters: tuple[str, ...] = PREFILTERS
    """Which options each LLM chooses among: lexical (the shipped LLM Swift) and/or ranker (the
    learned ranker's top-k)."""
    k: int = 8
    """Options per step (the shipped LLM Swift uses 8)."""
    ranker: str = "results/scienceworld/run2/ranker.npz"
    """The learned ranker (measured itself, and the ranker prefilter): the one the committed run2 used."""
    tasks: list[int] = field(default_factory=lambda: list(range(30)))
    """ScienceWorld task indices 0-29 ("0-29", "0,3,5-7")."""
    dev_variations: int = 1
    """The first N dev variations of each task supply gold steps."""
    steps_per_task: int = 4
    """Gold steps per task (a seeded sample), so every task weighs the same."""
    seed: int = 0
    """Seed of the step sample."""
    n_threads: int = 1
    """llama.cpp threads."""

    def validate(self) -> "SwiftAgreementConfig":
        if not self.llms and not self.ranker:
            raise ValueError("llms: expected at least one LLM (or a ranker)")
        bad = [p for p in self.prefilters if p not in PREFILTERS]
        if bad or not self.prefilters:
            raise ValueError(f"prefilters: expected some of {PREFILTERS}, got {list(self.prefilters)}")
        if not self.tasks or any(not 0 <= t < 30 for t in self.tasks):
            raise ValueError(f"tasks: expected indices in 0..29, got {self.tasks}")
        for name in ("k", "dev_variations", "steps_per_task", "n_threads"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}: expected an int >= 1, got {v!r}")
        return self


def proposer_name(llm: str, prefilter: str, k: int) -> str:
    """File-safe name of an LLM Swift configuration, e.g. ``llm-finetuned_scienceworld-ranker8``."""
    return f"llm-{re.sub(r'[^A-Za-z0-9.-]+', '_', llm).strip('_')}-{prefilter}{k}"


def model_sha256(llm: str) -> str | None:
    """sha256 of the model file an LLM name opens (model.json's for a fine-tuned folder; None for
    a backend that is not a local llama.cpp file), so a resumed measurement can tell a model that
    was replaced under the same name."""
    from metacog_fast.llm.models import default_gguf, resolve_model_folder, resolve_named_model
    from metacog_fast.llm.uri import parse_uri, resolve_uri

    if llm == BASE:
        return sha256_file(Path(default_gguf()))
    u = parse_uri(resolve_uri(llm))
    files = None
    if u.scheme == "finetuned":
        files = resolve_named_model(u.target)
    elif u.scheme == "llama-cpp" and u.target and Path(u.target).is_dir():
        files = resolve_model_folder(u.target)
    if files is not None and files.info and files.info.get("sha256"):
        return str(files.info["sha256"])
    if u.scheme == "llama-cpp" and u.target and Path(u.target).is_file():
        return sha256_file(Path(u.target))
    return None


def _open(llm: str, n_threads: int) -> Any:
    from metacog_fast.llm import open_llm

    return open_llm(None if llm == BASE else llm, n_threads=n_threads)


def _states(out: Path, cfg: SwiftAgreementConfig) -> tuple[list[dict[str, Any]], list[GoldExample]]:
    from metacog_fast.scienceworld.swift_eval import dev_gold

    path = out / "states.json"
    if path.is_file():
        rows = read_json(path)
    else:
        rows = [{"task_name": name, "variation": v, **asdict(ex)}
                for name, v, ex in dev_gold(cfg.tasks, cfg.dev_variations, cfg.steps_per_task, cfg.seed)]
        write_json_atomic(path, rows)
    keys = set(GoldExample.__dataclass_fields__)
    return rows, [GoldExample(**{k: r[k] for k in keys}) for r in rows]


def evaluate_swift_agreement(out_dir: str | Path, cfg: SwiftAgreementConfig) -> dict[str, Any]:
    """Measure (or resume measuring) every proposer of ``cfg`` into ``out_dir``; returns agreement.json."""
    from metacog_fast.scienceworld.swift import LLMSwift, RankerModel, RankerSwift, SwiftState
    from metacog_fast.scienceworld.swift_eval import top1_agreement
    from metacog_fast.metrics import mcnemar_exact, rate_with_interval

    cfg.validate()
    if not os.path.isfile(cfg.ranker):
        raise FileNotFoundError(f"ranker: no ranker file at {cfg.ranker}; train one with `metacog run scienceworld`")
    out = Path(out_dir)
    (out / "proposals").mkdir(parents=True, exist_ok=True)
    conf = {"config": {**asdict(cfg), "llms": list(cfg.llms), "prefilters": list(cfg.prefilters)},
            "ranker_sha256": sha256_file(Path(cfg.ranker))}
    if (out / "config.json").is_file():
        old = read_json(out / "config.json")
        same = ("tasks", "dev_variations", "steps_per_task", "seed", "k")
        if (any(old["config"][f] != conf["config"][f] for f in same) or old["ranker_sha256"] != conf["ranker_sha256"]):
            raise ValueError(f"{out}: the folder holds an evaluation of other steps or another ranker; use another folder")
    write_json_atomic(out / "config.json", conf)
    rows, examples = _states(out, cfg)
    ranker = RankerSwift(RankerModel.load(cfg.ranker))
    results: dict[str, dict[str, Any]] = {}

    models = {uri: model_sha256(uri) for uri in cfg.llms}

    def measure(name: str, proposer: Any, sha: str | None = None) -> None:
        path = out / "proposals" / f"{name}.json"
        if path.is_file():
            res = read_json(path)
            if sha is not None and res.get("model_sha256") not in (None, sha):
                raise ValueError(f"{path}: measured with model sha256 {res['model_sha256']}, but the name now opens "
                                 f"{sha}; delete the file to measure the new model")
            results[name] = res
            return
        res = top1_agreement(examples, {name: proposer})[name]
        res["model_sha256"] = sha
        write_json_atomic(path, res)
        results[name] = res

    measure("ranker", ranker, conf["ranker_sha256"])
    for uri in cfg.llms:
        todo = [p for p in cfg.prefilters if not (out / "proposals" / f"{proposer_name(uri, p, cfg.k)}.json").is_file()]
        llm = _open(uri, cfg.n_threads) if todo else None
        try:
            for p in cfg.prefilters:
                sw = None if llm is None else LLMSwift(llm, cfg.k, ranker if p == "ranker" else None)
                measure(proposer_name(uri, p, cfg.k), sw, models[uri])
        finally:
            if llm is not None:
                llm.close()
    ranker_in_top_k = []
    for ex in examples:
        s = SwiftState(ex.task, ex.observation, ex.last_action, ex.valid, ex.executed)
        ranker_in_top_k.append(ex.gold in ranker.candidates(s, cfg.k))
    paired = {}
    for uri in cfg.llms:
        for p in cfg.prefilters:
            name = proposer_name(uri, p, cfg.k)
            paired[f"{name} vs ranker"] = mcnemar_exact(results[name]["hits"], results["ranker"]["hits"])
            if uri != BASE and BASE in cfg.llms:
                base = proposer_name(BASE, p, cfg.k)
                paired[f"{name} vs {base}"] = mcnemar_exact(results[name]["hits"], results[base]["hits"])
    by_task: dict[str, dict[str, float]] = {}
    for name, res in results.items():
        for r, hit in zip(rows, res["hits"]):
            by_task.setdefault(r["task_name"], {}).setdefault(name, 0)
            by_task[r["task_name"]][name] += int(hit)
    summary = {
        "steps": len(examples), "tasks": len({r["task_name"] for r in rows}),
        "variations": sorted({f"{r['task_name']}__{r['variation']}" for r in rows}),
        "proposers": {n: {k: v for k, v in r.items() if k not in ("proposals", "hits")} for n, r in results.items()},
        "ranker_gold_in_top_k": rate_with_interval(ranker_in_top_k),
        "paired_mcnemar": paired, "hits_by_task": by_task, "model_sha256": models, **conf,
    }
    write_json_atomic(out / "agreement.json", summary)
    return summary


def agreement_markdown(summary: dict[str, Any]) -> str:
    """The table of an agreement.json: proposer, top-1 with its Wilson interval, gold in options."""
    def pct(r: dict[str, Any]) -> str:
        return f"{r['successes']}/{r['n']} = {100 * r['rate']:.1f} % [{100 * r['low']:.1f}, {100 * r['high']:.1f}]"

    lines = ["| proposer | top-1 agreement (Wilson 95 %) | gold among the options | ms/step |", "|---|---|---|---|"]
    for name, r in summary["proposers"].items():
        opts = pct(r["gold_in_options"]) if "gold_in_options" in r else "(all valid actions)"
        lines.append(f"| {name} | {pct(r['top1'])} | {opts} | {r['ms_per_step']:.0f} |")
    return "\n".join(lines) + "\n"


__all__ = ["BASE", "SwiftAgreementConfig", "agreement_markdown", "evaluate_swift_agreement", "proposer_name"]
