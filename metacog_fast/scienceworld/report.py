"""Metrics and tables of a run: task-level macro averages (paper Tables 1-2), Short/Medium/Long
groups by oracle path length, mechanism counts, costs, and a per-task score chart.

Uncertainty (docs/statistics.md): the final score carries a bootstrap interval over tasks
(``score_interval``), the success rate the Wilson interval of the episodes' wins (``success``),
and every pair of configurations is compared by a paired bootstrap over the tasks both ran
(per-task score and per-task success; ``comparisons`` in report.json). ``summary.png`` draws both
with error bars."""
from __future__ import annotations

import glob
import os
from collections import defaultdict
from typing import Any

from metacog_fast._atomic import atomic_open
from metacog_fast.scienceworld.config import CONFIG_NAMES
from metacog_fast.metrics import (
    claims_markdown,
    comparisons_markdown,
    evaluate_claims,
    mean_interval,
    pairwise_comparisons,
    success_interval,
)
from metacog_fast.scienceworld.store import read_json, write_json

GROUPS = (("Short", 0, 20), ("Medium", 21, 50), ("Long", 51, 10**9))
"""Oracle path length (gold steps, mean over the task's evaluated variations) -> group."""

MECHANISMS = ("memory_writes", "t1", "t4", "gate1_drops", "gate1_repairs", "critic_calls", "system2_calls",
              "sage_calls", "invalid_steps")


def load_episodes(run: str) -> dict[str, list[dict[str, Any]]]:
    """config -> episode dicts (errored episodes included; they count 0)."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in sorted(glob.glob(os.path.join(run, "episodes", "*", "*.json"))):
        ep = read_json(path)
        for key in ("config", "task", "score", "won", "steps", "mechanisms", "gold_len"):
            if key not in ep:
                raise ValueError(f"{path}: episode record lacks {key!r}")
        out[ep["config"]].append(ep)
    return dict(out)


def group_of(gold_len: float) -> str:
    for name, lo, hi in GROUPS:
        if lo <= gold_len <= hi:
            return name
    return GROUPS[-1][0]


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def task_table(eps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """task -> score (mean over variations), success, steps@succ, gold length."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in eps:
        by[e["task"]].append(e)
    out = {}
    for t, es in sorted(by.items()):
        succ = [e["steps"] for e in es if e["won"]]
        out[t] = {"score": _mean([e["score"] for e in es]), "success": _mean([float(e["won"]) for e in es]),
                  "steps_at_succ": _mean(succ), "gold_len": _mean([e["gold_len"] for e in es]), "episodes": len(es)}
    return out


def summarise(eps: list[dict[str, Any]]) -> dict[str, Any]:
    tasks = task_table(eps)
    steps = sum(e["steps"] for e in eps) or 1
    mech = {k: _mean([e["mechanisms"].get(k, 0) for e in eps]) for k in MECHANISMS}
    mech["swift_executed_pct"] = 100.0 * sum(e["mechanisms"]["swift_steps"] for e in eps) / steps
    mech["buffer_executed_pct"] = 100.0 * sum(e["mechanisms"]["buffer_steps"] for e in eps) / steps
    sas = [v["steps_at_succ"] for v in tasks.values() if v["steps_at_succ"] is not None]
    groups = {}
    for g, _, _ in GROUPS:
        ts = [v for v in tasks.values() if group_of(v["gold_len"]) == g]
        groups[g] = {"tasks": len(ts), "score": _mean([v["score"] for v in ts]),
                     "score_interval": mean_interval([v["score"] for v in ts]) if ts else None}
    return {
        "episodes": len(eps), "tasks": len(tasks),
        "score": _mean([v["score"] for v in tasks.values()]),
        "score_interval": mean_interval([v["score"] for v in tasks.values()]) if tasks else None,
        "success_pct": 100.0 * (_mean([v["success"] for v in tasks.values()]) or 0.0),
        "success": success_interval([bool(e["won"]) for e in eps]).to_dict() if eps else None,
        "steps_at_succ": _mean(sas),
        "errored": sum(int(e.get("errored", False)) for e in eps),
        "groups": groups, "mechanisms": mech,
        "costs": {
            "llm_calls": _mean([e["llm_calls"] for e in eps]), "llm_tokens": _mean([e["llm_tokens"] for e in eps]),
            "llm_seconds": _mean([e["llm_seconds"] for e in eps]), "env_seconds": _mean([e["env_seconds"] for e in eps]),
            "agent_ms_per_step": 1000.0 * sum(e["agent_seconds"] for e in eps) / steps,
        },
        "per_task": tasks,
    }


def _f(x: Any, nd: int = 2) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _ci(x: dict[str, Any] | None, nd: int = 2) -> str:
    """`` [lo, hi]`` of a mean_interval dict; empty without one."""
    return f" [{x['low']:.{nd}f}, {x['high']:.{nd}f}]" if x else ""


def _wilson(x: dict[str, Any] | None) -> str:
    """`` [lo, hi] (k/n)`` in percent of a success interval dict; empty without one."""
    return f" [{100 * x['low']:.1f}, {100 * x['high']:.1f}] ({x['successes']}/{x['n']})" if x else ""


def per_unit(summary: dict[str, dict[str, Any]], key: str) -> dict[str, dict[str, float]]:
    """config -> {task: per-task ``key`` (score or success)}, the units of the paired comparisons."""
    return {c: {t: v[key] for t, v in summary[c]["per_task"].items() if v[key] is not None}
            for c in CONFIG_NAMES if c in summary}


PAPER_CLAIMS = ("full >= srm > amm > baseline",)
"""Paper 004's ordering of its four configurations (full system, + self-regulation module,
+ adaptive memory module, baseline), tested on per-task final score and on per-task success."""


def claims(summary: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """PAPER_CLAIMS tested as stated (metrics/claims.py), paired by task, on score and success."""
    return {"score": evaluate_claims(per_unit(summary, "score"), PAPER_CLAIMS),
            "success": evaluate_claims(per_unit(summary, "success"), PAPER_CLAIMS)}


def comparisons(summary: dict[str, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Every pair of configurations, paired by task: final score and success (A - B)."""
    return {"score": pairwise_comparisons(per_unit(summary, "score"), "per-task final score"),
            "success": pairwise_comparisons(per_unit(summary, "success"), "per-task success rate")}


def tables_markdown(summary: dict[str, dict[str, Any]], comps: dict[str, list[dict[str, Any]]] | None = None,
                    tested: dict[str, list[dict[str, Any]]] | None = None) -> str:
    cfgs = [c for c in CONFIG_NAMES if c in summary]
    lines = ["Table 1. Task-level macro-averaged results", "",
             "Final score: mean over tasks with a 95 % bootstrap interval over tasks. Success: mean over tasks of the "
             "per-task success; in brackets the Wilson 95 % interval of the episodes' wins (wins/episodes).", "",
             "| config | episodes | tasks | final score | success % | Steps@Succ |", "|---|---|---|---|---|---|"]
    for c in cfgs:
        s = summary[c]
        lines.append(f"| {c} | {s['episodes']} | {s['tasks']} | {_f(s['score'])}{_ci(s.get('score_interval'))} | "
                     f"{_f(s['success_pct'])}{_wilson(s.get('success'))} | {_f(s['steps_at_succ'])} |")
    lines += ["", "Table 2. Mean final score by oracle-length group (relative change vs baseline)", "",
              "| config | " + " | ".join(f"{g} (≤{hi})" if hi < 10**9 else f"{g} (>{lo - 1})" for g, lo, hi in GROUPS) + " |",
              "|---|" + "---|" * len(GROUPS)]
    base = summary.get("baseline")
    for c in cfgs:
        cells = []
        for g, _, _ in GROUPS:
            v = summary[c]["groups"][g]["score"]
            b = base["groups"][g]["score"] if base else None
            rel = f" ({100.0 * (v - b) / b:+.1f} %)" if (v is not None and b and c != "baseline") else ""
            cells.append(_f(v) + _ci(summary[c]["groups"][g].get("score_interval")) + rel
                         + f" (n={summary[c]['groups'][g]['tasks']})")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    lines += ["", "Mechanism counts (mean per episode)", "",
              "| config | mem writes | T1 | T4 | Gate-1 drops | Gate-1 repairs | Critic | System-2 | Swift-exec % | buffer-exec % | invalid steps |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cfgs:
        m = summary[c]["mechanisms"]
        lines.append(f"| {c} | {_f(m['memory_writes'])} | {_f(m['t1'])} | {_f(m['t4'])} | {_f(m['gate1_drops'])} | "
                     f"{_f(m['gate1_repairs'])} | {_f(m['critic_calls'])} | {_f(m['system2_calls'])} | "
                     f"{_f(m['swift_executed_pct'], 1)} | {_f(m['buffer_executed_pct'], 1)} | {_f(m['invalid_steps'])} |")
    lines += ["", "Costs (mean per episode)", "", "| config | LLM calls | LLM tokens | LLM s | env s | agent ms/step |",
              "|---|---|---|---|---|---|"]
    for c in cfgs:
        k = summary[c]["costs"]
        lines.append(f"| {c} | {_f(k['llm_calls'], 1)} | {_f(k['llm_tokens'], 0)} | {_f(k['llm_seconds'])} | "
                     f"{_f(k['env_seconds'])} | {_f(k['agent_ms_per_step'], 3)} |")
    tasks = sorted({t for c in cfgs for t in summary[c]["per_task"]})
    lines += ["", "Per-task final score", "", "| task | gold len | " + " | ".join(cfgs) + " |", "|---|---|" + "---|" * len(cfgs)]
    for t in tasks:
        gl = next(summary[c]["per_task"][t]["gold_len"] for c in cfgs if t in summary[c]["per_task"])
        lines.append(f"| {t} | {_f(gl, 0)} | " + " | ".join(_f(summary[c]["per_task"].get(t, {}).get("score")) for c in cfgs) + " |")
    if tested:
        lines += claims_markdown(tested["score"], "The paper's ordering, tested as stated: per-task final score", "task",
                                 scale=1.0, nd=2)
        lines += claims_markdown(tested["success"], "The paper's ordering, tested as stated: per-task success", "task")
    if comps:
        lines += comparisons_markdown(comps["score"], "Paired comparisons: per-task final score (points, 0-100)", "task")
        lines += comparisons_markdown(comps["success"], "Paired comparisons: per-task success rate (percentage points)",
                                      "task", scale=100.0, nd=1)
    return "\n".join(lines) + "\n"


def summary_chart(summary: dict[str, dict[str, Any]], path: str) -> None:
    """Two panels per configuration: mean final score (bootstrap interval over tasks) and success
    rate (Wilson interval over episodes), as bars with error bars (PNG, atomic)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    cfgs = [c for c in CONFIG_NAMES if c in summary]
    fig = Figure(figsize=(max(6.0, 1.2 * len(cfgs) + 3), 3.6))
    for k, (key, ivkey, label, scale) in enumerate((("score", "score_interval", "final score (0-100)", 1.0),
                                                    ("success", "success", "success rate (%)", 100.0))):
        ax = fig.add_subplot(1, 2, k + 1)
        vals, los, his = [], [], []
        for c in cfgs:
            iv = summary[c].get(ivkey) or {}
            v = iv.get("mean", iv.get("rate"))
            v = float("nan") if v is None else scale * v
            vals.append(v)
            los.append(v - scale * iv["low"] if iv else 0.0)
            his.append(scale * iv["high"] - v if iv else 0.0)
        ax.bar(range(len(cfgs)), vals, color=[f"C{i}" for i in range(len(cfgs))])
        ax.errorbar(range(len(cfgs)), vals, yerr=[los, his], fmt="none", ecolor="black", capsize=4, lw=1)
        ax.set_xticks(range(len(cfgs)))
        ax.set_xticklabels(cfgs)
        ax.set_ylabel(label)
        ax.set_ylim(0, max(1.0, max((v + h for v, h in zip(vals, his) if v == v), default=1.0)) * 1.1)
    fig.suptitle("95 % intervals: bootstrap over tasks (score), Wilson over episodes (success)", fontsize=9)
    fig.tight_layout()
    with atomic_open(path, "wb") as f:
        fig.savefig(f, format="png", dpi=110)


def score_chart(summary: dict[str, dict[str, Any]], path: str) -> None:
    """Grouped bars: per-task final score of each configuration (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cfgs = [c for c in CONFIG_NAMES if c in summary]
    tasks = sorted({t for c in cfgs for t in summary[c]["per_task"]})
    x = np.arange(len(tasks))
    w = 0.8 / max(1, len(cfgs))
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(tasks) + 2), 4))
    for i, c in enumerate(cfgs):
        ys = [summary[c]["per_task"].get(t, {}).get("score") or 0.0 for t in tasks]
        ax.bar(x + i * w, ys, w, label=c)
    ax.set_xticks(x + 0.4 - w / 2)
    ax.set_xticklabels(tasks, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("final score (0-100)")
    ax.set_ylim(0, 100)
    ax.legend()
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def paired(eps: dict[str, list[dict[str, Any]]]) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Keep the (task, variation) episodes every configuration has (a run stopped early is
    compared on the same episodes); returns the kept episodes and how many were left out."""
    keys = [{(e["task"], e["variation"]) for e in es} for es in eps.values()]
    common = set.intersection(*keys) if keys else set()
    kept = {c: [e for e in es if (e["task"], e["variation"]) in common] for c, es in eps.items()}
    dropped = sum(len(es) for es in eps.values()) - sum(len(es) for es in kept.values())
    return kept, dropped


def report(run: str, out: str | None = None, all_episodes: bool = False) -> dict[str, Any]:
    """Summaries of every configuration in ``run``; writes report.json, tables.md, scores.png.

    By default only (task, variation) pairs present in every configuration count (``all_episodes``
    keeps everything)."""
    eps = load_episodes(run)
    if not eps:
        raise ValueError(f"run: no episodes under {os.path.join(run, 'episodes')}")
    dropped = 0
    if not all_episodes:
        eps, dropped = paired(eps)
    summary = {c: summarise(e) for c, e in eps.items() if e}
    if not summary:
        raise ValueError(f"run: no (task, variation) was evaluated by every configuration in {run}")
    out = out or run
    comps = comparisons(summary)
    tested = claims(summary)
    write_json(os.path.join(out, "report.json"), {"configs": summary, "unpaired_episodes_left_out": dropped,
                                                  "comparisons": comps, "claims": tested})
    md = tables_markdown(summary, comps, tested) + f"\nEpisodes left out because not every configuration ran them: {dropped}\n"
    with atomic_open(os.path.join(out, "tables.md")) as f:
        f.write(md)
    score_chart(summary, os.path.join(out, "scores.png"))
    summary_chart(summary, os.path.join(out, "summary.png"))
    return summary
