"""Metrics, the paper's Tables 2-5, Type-2 ROC plots and costs of one or more agent runs.

``report(root)`` reads every run folder under ``root`` (a folder with ``config.json`` and
``episodes/``), computes per agent and per task type:

* success rate: mean over games of the per-game success over its test episodes (docs/design.md §3);
* mean steps per test episode with 100 charged for a failure;
* AUROC2 and metacognitive accuracy (threshold 0.5) of chunk-wise M_sa predictions on test
  episodes (MUSE agents): with the pre-deployment g_eta ("No Adaptation") and the adapted one;
* costs per episode: LLM calls, prompt/completion tokens, LLM / env / agent seconds;

and writes ``report.json`` and ``tables.md`` (atomically) and ``roc_<agent>.png``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from metacog_fast.agents.alfworld.store import read_json, write_json_atomic


def find_runs(root: str | Path) -> list[Path]:
    r = Path(root)
    if not r.exists():
        raise FileNotFoundError(f"run: no folder {r}")
    runs = [p.parent for p in sorted(r.rglob("config.json")) if (p.parent / "episodes").is_dir()
            and "collect" not in p.parent.parts]
    if not runs:
        raise ValueError(f"run: no run folder (config.json + episodes/) under {r}")
    return runs


def load_run(run: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    cfg = read_json(run / "config.json")
    recs = [read_json(p) for p in sorted((run / "episodes").glob("*/*.json"))]
    return cfg, recs


def _game_success(test: list[dict[str, Any]]) -> float:
    by_game: dict[str, list[float]] = {}
    for r in test:
        by_game.setdefault(r["game"], []).append(float(bool(r["won"])))
    return float(np.mean([np.mean(v) for v in by_game.values()])) if by_game else float("nan")


def summarize(recs: list[dict[str, Any]], phase: str = "test", adapted: bool = True) -> dict[str, Any]:
    """Metrics of one agent's records of ``phase``. ``adapted``: the run had adaptation episodes
    (without them the adapted g_eta is the pre-deployment one, so only "no_adaptation" is reported)."""
    from metacog_fast.metrics import auroc2, mean_steps_charged, metacognitive_accuracy

    sel = [r for r in recs if r["phase"] == phase]
    out: dict[str, Any] = {"episodes": len(sel), "games": len({r["game"] for r in sel})}
    if not sel:
        return out
    won = np.array([bool(r["won"]) for r in sel])
    out["success_rate"] = _game_success(sel)
    out["mean_steps_charged"] = float(mean_steps_charged(np.array([r["steps"] for r in sel]), won))
    out["per_type"] = {}
    for t in sorted({r["task_type"] for r in sel}):
        st = [r for r in sel if r["task_type"] == t]
        out["per_type"][t] = {"success_rate": _game_success(st),
                              "mean_steps_charged": float(mean_steps_charged(
                                  np.array([r["steps"] for r in st]), np.array([bool(r["won"]) for r in st]))),
                              "episodes": len(st)}
    conds = (("chunk_probs_pre", "no_adaptation"), ("chunk_probs", "adaptation")) if adapted else \
        (("chunk_probs_pre", "no_adaptation"),)
    for key, name in conds:
        probs, labels = [], []
        for r in sel:
            for p in r.get(key, []) or []:
                probs.append(p)
                labels.append(float(bool(r["won"])))
        if probs:
            y = np.array(labels)
            both = 0 < y.sum() < len(y)
            out[f"auroc2_{name}"] = float(auroc2(np.array(probs), y)) if both else None
            out[f"meta_accuracy_{name}"] = float(metacognitive_accuracy(np.array(probs), y))
            out[f"chunks_{name}"] = len(probs)
            out[f"_probs_{name}"] = (probs, labels)
    steps_agent = [s["agent_seconds"] for r in sel for s in r["step_log"]]
    out["costs"] = {
        "llm_calls": float(np.mean([r["llm"]["calls"] for r in sel])),
        "prompt_tokens": float(np.mean([r["llm"]["prompt_tokens"] for r in sel])),
        "completion_tokens": float(np.mean([r["llm"]["completion_tokens"] for r in sel])),
        "llm_seconds": float(np.mean([r["llm"]["seconds"] for r in sel])),
        "env_seconds": float(np.mean([r["env_seconds"] for r in sel])),
        "agent_seconds": float(np.mean([r["agent_seconds"] for r in sel])),
        "agent_ms_per_step": 1000.0 * float(np.mean(steps_agent)) if steps_agent else None,
        "wall_seconds": float(np.mean([r["wall_seconds"] for r in sel])),
    }
    out["mapping"] = {h: sum(1 for r in sel for s in r["step_log"] if s["how"] == h)
                      for h in ("exact", "embed", "choose", "raw")}
    return out


def _pct(x: Any) -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.0f}%"


def _num(x: Any, spec: str = ".1f") -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, spec)


def report(root: str | Path, out: str | Path | None = None) -> dict[str, Any]:
    """Compute everything for the runs under ``root``; write report.json, tables.md, ROC plots."""
    from metacog_fast.metrics import plot_type2_roc

    root = Path(root)
    out_dir = Path(out) if out else root
    agents: dict[str, dict[str, Any]] = {}
    for run in find_runs(root):
        cfg, recs = load_run(run)
        c = cfg["config"]
        label = run_label(c, agents)
        summ = summarize(recs, "test", adapted=c["adapt_episodes"] > 0)
        summ["adapt_episodes"] = c["adapt_episodes"]
        summ["config"] = c
        summ["run"] = str(run)
        if "_probs_adaptation" in summ or "_probs_no_adaptation" in summ:
            for name in ("no_adaptation", "adaptation"):
                pl = summ.pop(f"_probs_{name}", None)
                if pl and 0 < sum(pl[1]) < len(pl[1]):
                    p = plot_type2_roc(pl[0], pl[1], out_dir / f"roc_{label}_{name}.png",
                                       title=f"Type-2 ROC, {label}, {name.replace('_', ' ')}")
                    summ[f"roc_{name}"] = str(p)
        agents[label] = summ
    tables = render_tables(agents)
    res = {"agents": agents}
    write_json_atomic(out_dir / "report.json", res)
    tmp = out_dir / ".tables.md.tmp"
    tmp.write_text(tables)
    tmp.replace(out_dir / "tables.md")
    return res


AGENT_ORDER = ("react", "reflexion", "fcrf", "muse-lowest", "muse-random", "muse")


def run_label(config: dict[str, Any], taken: dict[str, Any]) -> str:
    """A run's row label: its agent name, or ``<agent>+adapt<n>`` when a run of the same agent is
    already in the report (e.g. MUSE without and with adaptation episodes under one folder)."""
    label = config["agent"]
    if label in taken:
        label = f"{label}+adapt{config['adapt_episodes']}"
    k = 2
    base = label
    while label in taken:
        label, k = f"{base}#{k}", k + 1
    return label


def render_tables(agents: dict[str, dict[str, Any]]) -> str:
    """Markdown in the form of the paper's Tables 2-5, per-type tables and costs (one row per run:
    the paper's agents in their order, then any further runs of an agent under their labels)."""
    rank = {a: i for i, a in enumerate(AGENT_ORDER)}
    order = sorted(agents, key=lambda a: (rank.get(a.split("+")[0].split("#")[0], len(rank)), a))
    L: list[str] = []

    def col(a: str, key: str, fmt: Any) -> tuple[str, str]:
        s = agents[a]
        v = fmt(s.get(key))
        return (v, "—") if s["adapt_episodes"] == 0 else ("—", v)

    L.append("## Table 2: self-assessment (MUSE, chunk-wise M_sa on test episodes)\n")
    L.append("| Agent | Condition | AUROC2 | Metacognitive accuracy | chunks |\n|---|---|---|---|---|")
    for a in order:
        s = agents[a]
        for name, cond in (("no_adaptation", "No Adaptation (pre-deployment g_eta)"), ("adaptation", "Adaptation")):
            if f"chunks_{name}" in s:
                L.append(f"| {a} | {cond} | {_num(s.get(f'auroc2_{name}'), '.2f')} | "
                         f"{_pct(s.get(f'meta_accuracy_{name}'))} | {s[f'chunks_{name}']} |")
    L.append("\n## Table 3: success rate on the deployment games\n")
    L.append("| Agent | No Adaptation | Adaptation | test episodes |\n|---|---|---|---|")
    for a in order:
        na, ad = col(a, "success_rate", _pct)
        L.append(f"| {a} | {na} | {ad} | {agents[a].get('episodes', 0)} |")
    L.append("\n## Table 4: mean steps per episode (100 charged for a failure)\n")
    L.append("| Agent | No Adaptation | Adaptation |\n|---|---|---|")
    for a in order:
        na, ad = col(a, "mean_steps_charged", lambda x: _num(x, ".0f"))
        L.append(f"| {a} | {na} | {ad} |")
    L.append("\n## Table 5: success rate with a small LLM\n")
    L.append("| Agent | SmolLM2-135M-Instruct (Q4_1) |\n|---|---|")
    for a in order:
        L.append(f"| {a} | {_pct(agents[a].get('success_rate'))} |")
    types = sorted({t for a in order for t in agents[a].get("per_type", {})})
    L.append("\n## Success rate per task type\n")
    L.append("| Agent | " + " | ".join(types) + " |\n|---|" + "---|" * len(types))
    for a in order:
        pt = agents[a].get("per_type", {})
        L.append(f"| {a} | " + " | ".join(_pct(pt.get(t, {}).get("success_rate")) for t in types) + " |")
    L.append("\n## Costs per test episode\n")
    L.append("| Agent | LLM calls | prompt tokens | completion tokens | LLM s | env s | agent s | agent ms/step | wall s |"
             "\n|---|---|---|---|---|---|---|---|---|")
    for a in order:
        c = agents[a].get("costs")
        if c:
            L.append(f"| {a} | {c['llm_calls']:.1f} | {c['prompt_tokens']:.0f} | {c['completion_tokens']:.0f} | "
                     f"{c['llm_seconds']:.1f} | {c['env_seconds']:.1f} | {c['agent_seconds']:.2f} | "
                     f"{_num(c['agent_ms_per_step'], '.1f')} | {c['wall_seconds']:.1f} |")
    L.append("\n## Admissible mapping (test steps)\n")
    L.append("| Agent | exact | embed | choose | raw |\n|---|---|---|---|---|")
    for a in order:
        m = agents[a].get("mapping", {})
        L.append(f"| {a} | {m.get('exact', 0)} | {m.get('embed', 0)} | {m.get('choose', 0)} | {m.get('raw', 0)} |")
    return "\n".join(L) + "\n"
