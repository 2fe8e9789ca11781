"""M_sa against trivial predictors on the test episodes of ALFWorld MUSE runs
(``metacog report alfworld-assessor RUN``; the measure is :mod:`metacog_fast.metrics.assessor`).

For every MUSE run under a folder (a run folder: ``config.json`` + ``episodes/<game>/<phase>_<k>.json``),
on the test episodes of the games whose test episodes are all recorded (as ``report.py``):

* **assessors**: the chunk-wise M_sa probabilities ``report.py`` scores, with the adapted g_eta
  (``chunk_probs``, "adaptation"; only when the run had adaptation episodes) and the
  pre-deployment one (``chunk_probs_pre``, "no_adaptation"); the label of a chunk is its episode's
  success, its episode id ``<game>#<episode>`` (the same rows as ``report.py``'s ``auroc2_*``);
* **trivial predictors**: the chunk's position (its index in the episode; the step fraction,
  first step / step budget, ranks the same), the task type's prior (success rate of the type's test
  episodes in *other* games, out of fold), the game's adaptation-episode win rate (what the agent
  knew before its tests; when the run had adaptation episodes), the actor's token log-probability
  of its actions (when the records carry it: run 3's do not, and the output says so), and their
  cross-fitted logistic combination;
* AUROC2 with cluster-bootstrap intervals, AUROC2 by position bucket (chunk 0, 1, 2, 3-4, 5+),
  ECE and reliability data, and the paired difference of each assessor against the best trivial
  predictor, resampling games, with its verdict.

Writes ``assessor.json`` and ``assessor.md`` (atomically), ``reliability_<agent>.png`` and
``auroc2_by_position_<agent>.png``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from metacog_fast._atomic import atomic_open
from metacog_fast.alfworld.report import complete_games, find_runs, load_run, run_label
from metacog_fast.alfworld.store import write_json_atomic

CHUNK_SIZE = 4
"""Pairs per chunk of M_sa (``ScorerConfig.chunk_size``; each record is checked against it)."""
POSITION_EDGES = (1, 2, 3, 5)
"""Chunk-index buckets of the AUROC2 by position: 0, 1, 2, 3-4, 5+."""
CONDITIONS = (("chunk_probs", "adaptation"), ("chunk_probs_pre", "no_adaptation"))
"""(record key, name) of the M_sa conditions, as report.py names them."""
POSITION = "position (chunk index)"
TYPE_PRIOR = "task-type prior"
ADAPT_WIN = "adaptation win rate"
LOGPROB = "actor log-probability"
LOGPROB_KEYS = ("logprob", "logprobs", "token_logprob", "action_logprob")
"""step_log keys that would carry the actor's token log-probability of its action."""


@dataclass
class AssessorRows:
    """The per-chunk table of one run's test episodes (R chunks; every list has R entries)."""

    label: str
    """Row label of the run (report.py's ``run_label``)."""
    assessors: dict[str, list[float]]
    """Condition name ("adaptation", "no_adaptation") -> M_sa probability of each chunk."""
    outcome: list[int]
    """Success (1) or failure (0) of the chunk's episode."""
    episode: list[str]
    """``<game>#<episode>``."""
    game: list[str]
    task_type: list[str]
    chunk_index: list[int]
    """Index of the chunk in its episode (0 = its first CHUNK_SIZE steps)."""
    step_fraction: list[float]
    """First step of the chunk / the run's step budget (``max_steps``)."""
    adapt_win_rate: list[float] | None
    """Success rate of the game's adaptation episodes (None: the run had none)."""
    actor_logprob: list[float] | None
    """Mean token log-probability of the actor's actions in the chunk (None: not recorded)."""
    missing: dict[str, str] = field(default_factory=dict)
    """Trivial signal -> why it is not measured."""
    facts: dict[str, Any] = field(default_factory=dict)
    """Counts: test episodes, games, chunks, games left out while in progress."""


def _step_logprob(step: dict[str, Any]) -> float | None:
    for k in LOGPROB_KEYS:
        v = step.get(k)
        if isinstance(v, (int, float)) and math.isfinite(v):
            return float(v)
        if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v):
            return float(np.mean(v))
    return None


def assessor_rows(run: str | Path, taken: dict[str, Any] | None = None) -> AssessorRows | None:
    """The chunk table of the MUSE run folder ``run`` (None when its test records carry no M_sa
    chunk probabilities, e.g. a ReAct run). ``taken``: labels already used (report.py's rule)."""
    run = Path(run)
    cfg, recs = load_run(run)
    c = cfg["config"]
    label = run_label(c, taken or {})
    per_game = c.get("test_episodes")
    in_progress = 0
    if isinstance(per_game, int) and per_game > 0:
        recs, in_progress = complete_games(recs, per_game)
    test = [r for r in recs if r["phase"] == "test"]
    if not any(r.get("chunk_probs_pre") for r in test):
        return None
    adapted = c.get("adapt_episodes", 0) > 0
    conds = [(k, n) for k, n in CONDITIONS if adapted or n == "no_adaptation"]
    max_steps = int(c.get("agent_config", {}).get("max_steps") or 0) or max(r["steps"] for r in test)
    wins: dict[str, list[float]] = {}
    for r in recs:
        if r["phase"] == "adapt":
            wins.setdefault(r["game"], []).append(float(bool(r["won"])))
    rows = AssessorRows(label, {n: [] for _, n in conds}, [], [], [], [], [], [], [] if adapted else None, [])
    logprob_seen = True
    for r in test:
        n = len(r.get("chunk_probs_pre") or [])
        if n != math.ceil(len(r["pairs"]) / CHUNK_SIZE):
            raise ValueError(f"run: {r['game']} test {r['episode']} has {n} chunk probabilities for "
                             f"{len(r['pairs'])} steps (expected chunks of {CHUNK_SIZE})")
        for key, name in conds:
            probs = r.get(key) or []
            if len(probs) != n:
                raise ValueError(f"run: {r['game']} test {r['episode']}: {key} has {len(probs)} values, "
                                 f"chunk_probs_pre {n}")
            rows.assessors[name] += [float(p) for p in probs]
        steps = r.get("step_log") or []
        for i in range(n):
            rows.outcome.append(int(bool(r["won"])))
            rows.episode.append(f"{r['game']}#{r['episode']}")
            rows.game.append(r["game"])
            rows.task_type.append(r["task_type"])
            rows.chunk_index.append(i)
            rows.step_fraction.append(i * CHUNK_SIZE / max_steps)
            if rows.adapt_win_rate is not None:
                if r["game"] not in wins:
                    raise ValueError(f"run: game {r['game']} has test episodes but no adaptation episode")
                rows.adapt_win_rate.append(float(np.mean(wins[r["game"]])))
            lp = [_step_logprob(s) for s in steps[i * CHUNK_SIZE:(i + 1) * CHUNK_SIZE]]
            if lp and all(v is not None for v in lp):
                rows.actor_logprob.append(float(np.mean(lp)))
            else:
                logprob_seen = False
    if not logprob_seen or not rows.actor_logprob:
        rows.actor_logprob = None
        rows.missing[LOGPROB] = ("not in the records: the test episodes' step_log carries no token "
                                 f"log-probabilities (none of {', '.join(LOGPROB_KEYS)})")
    if not adapted:
        rows.missing[ADAPT_WIN] = "the run had no adaptation episodes"
    rows.facts = {"run": run.name, "test_episodes": len(test), "games": len({r["game"] for r in test}),
                  "chunks": len(rows.outcome), "episodes_in_progress_left_out": in_progress,
                  "games_planned": len(cfg.get("games") or []), "max_steps": max_steps,
                  "adapt_episodes": c.get("adapt_episodes", 0), "agent": c.get("agent")}
    return rows


def evaluate_rows(rows: AssessorRows, folds: int = 5, bins: int = 10, resamples: int = 10000,
                  seed: int = 0) -> dict[str, Any]:
    """:func:`metacog_fast.metrics.assessor.evaluate_assessor` on one run's chunk table (folds
    stratified by task type), as a JSON-ready dict with the run's facts and the missing signals."""
    from metacog_fast.metrics.assessor import evaluate_assessor

    signals: dict[str, Any] = {POSITION: rows.chunk_index}
    if rows.adapt_win_rate is not None:
        signals[ADAPT_WIN] = rows.adapt_win_rate
    if rows.actor_logprob is not None:
        signals[LOGPROB] = rows.actor_logprob
    rep = evaluate_assessor({f"M_sa {n}": v for n, v in rows.assessors.items()}, rows.outcome, rows.episode,
                            rows.game, signals=signals, priors={TYPE_PRIOR: rows.task_type},
                            position=rows.chunk_index, position_edges=POSITION_EDGES, folds=folds,
                            fold_strata=rows.task_type, bins=bins, resamples=resamples, seed=seed)
    return {**rows.facts, "label": rows.label, "missing_signals": dict(rows.missing), **rep.to_dict()}


def _auc(r: dict[str, Any]) -> str:
    if not r["defined"]:
        return f"undefined ({r['reason']})"
    return f"{r['value']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"


def _auc_short(r: dict[str, Any] | None) -> str:
    if not r:
        return "—"
    return f"{r['value']:.2f}" if r["defined"] else "undef."


def render_markdown(results: dict[str, dict[str, Any]]) -> str:
    """assessor.md: per run, the predictors' AUROC2 and ECE, AUROC2 by position, the verdicts."""
    L = ["# M_sa against trivial predictors (test episodes, held-out games)", "",
         "AUROC2 with its 95 % cluster-bootstrap interval over episodes (successful / failed episodes); "
         "ECE over 10 equal-width bins with its 95 % cluster-bootstrap interval. Trivial predictors are "
         "cross-fitted over folds of games (docs/alfworld_agents.md, \"M_sa against trivial predictors\"); "
         "a single signal ranks chunks by its held-out value in the direction its fold models learned "
         "(− = higher means failure). Verdict: M_sa **beats** the best trivial predictor only when the "
         "95 % interval of the paired difference (resampling games) lies above 0.", ""]
    for label, res in results.items():
        L += [f"## {label}", "",
              f"{res['test_episodes']} test episodes of {res['games']} games"
              + (f" (of {res['games_planned']} planned: run in progress)"
                 if res["games_planned"] > res["games"] else "")
              + f", {res['chunks']} chunks; "
              f"{res['folds']} folds of games, best trivial predictor: **{res['best_trivial']}**.", ""]
        for name, why in res["missing_signals"].items():
            L.append(f"* not measured: {name}: {why}.")
        if res["missing_signals"]:
            L.append("")
        L += ["| predictor | kind | AUROC2 [95 %] | episodes +/− | ECE [95 %] |", "|---|---|---|---|---|"]
        for name, p in res["predictors"].items():
            a, cal = p["auroc2"], p["calibration"]
            kind = p["kind"] + {1: "", -1: " (−)", 0: ""}[p["direction"]] if p["kind"] != "assessor" else "assessor"
            if p["kind"] == "combination":
                kind += ": " + ", ".join(p["features"])
            L.append(f"| {name} | {kind} | {_auc(a)} | {a['positives']} / {a['negatives']} | "
                     f"{cal['ece']:.3f} [{cal['low']:.3f}, {cal['high']:.3f}] |")
        L += ["", "AUROC2 by position (chunk index in the episode; 5 or more successful and failed episodes "
              "needed):", "", "| predictor | " + " | ".join(res["position_buckets"]) + " |",
              "|---|" + "---|" * len(res["position_buckets"])]
        for name, p in res["predictors"].items():
            L.append(f"| {name} | " + " | ".join(_auc_short(p["by_position"].get(b)) for b in res["position_buckets"])
                     + " |")
        first = next(iter(res["predictors"].values()))
        L.append("| chunks (episodes +/−) | " + " | ".join(
            f"{first['by_position'][b]['rows']} ({first['by_position'][b]['positives']}/"
            f"{first['by_position'][b]['negatives']})" if b in first["by_position"] else "0"
            for b in res["position_buckets"]) + " |")
        L += ["", "| assessor | − best trivial | difference [95 %] | p | verdict |", "|---|---|---|---|---|"]
        for name, c in res["comparisons"].items():
            if c["diff"] is None:
                L.append(f"| {name} | {c['baseline'] or '—'} | — | — | undefined ({c['reason']}) |")
            else:
                L.append(f"| {name} | {c['baseline']} | {c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}] | "
                         f"{c['p_value']:.3g} | **{c['verdict']}** |")
        L += ["", "By position: each assessor against the trivial predictor that is best within the bucket "
              "(paired, resampling games):", "",
              "| assessor | " + " | ".join(res["position_buckets"]) + " |",
              "|---|" + "---|" * len(res["position_buckets"])]
        for name, per in res.get("comparisons_by_position", {}).items():
            cells = []
            for b in res["position_buckets"]:
                c = per.get(b)
                cells.append("—" if not c or c["diff"] is None else
                             f"{c['diff']:+.2f} [{c['low']:+.2f}, {c['high']:+.2f}] vs {c['baseline']}: {c['verdict']}")
            L.append(f"| {name} | " + " | ".join(cells) + " |")
        L.append("")
    return "\n".join(L) + "\n"


def _plots(label: str, res: dict[str, Any], out_dir: Path) -> dict[str, str]:
    from metacog_fast.metrics import plot_rates_with_intervals
    from metacog_fast.metrics.assessor import plot_reliability

    names = [n for n, p in res["predictors"].items() if p["kind"] == "assessor"]
    best = res["best_trivial"]
    shown = names + ([best] if best else [])
    if best != "combination" and "combination" in res["predictors"]:
        shown.append("combination")
    paths = {"reliability": Path(plot_reliability({n: res["predictors"][n]["calibration"] for n in shown},
                                                  out_dir / f"reliability_{label}.png",
                                                  title=f"Reliability, {label} (test chunks)")).name}
    groups = {}
    for n in shown:
        g = {}
        for b in res["position_buckets"]:
            r = res["predictors"][n]["by_position"].get(b)
            g[b] = {"rate": r["value"], "low": r["low"], "high": r["high"]} if r and r["defined"] else None
        groups[n] = g
    paths["auroc2_by_position"] = Path(plot_rates_with_intervals(
        groups, out_dir / f"auroc2_by_position_{label}.png", ylabel="AUROC2",
        title=f"AUROC2 by chunk index, {label} (95 % cluster bootstrap)")).name
    return paths


def assessor_report(root: str | Path, out: str | Path | None = None, folds: int = 5, bins: int = 10,
                    resamples: int = 10000, seed: int = 0) -> dict[str, Any]:
    """Measure every MUSE run under ``root`` (runs without M_sa chunk probabilities are skipped);
    write assessor.json, assessor.md and the plots to ``out`` (default ``root``). Returns
    {label: result}."""
    root = Path(root)
    out_dir = Path(out) if out else root
    results: dict[str, dict[str, Any]] = {}
    taken: dict[str, Any] = {}
    for run in find_runs(root):
        rows = assessor_rows(run, taken)
        if rows is None:
            continue
        taken[rows.label] = True
        res = evaluate_rows(rows, folds, bins, resamples, seed)
        res["plots"] = _plots(rows.label, res, out_dir)
        results[rows.label] = res
    if not results:
        raise ValueError(f"run: no run with M_sa chunk probabilities (a MUSE agent) under {root}")
    write_json_atomic(out_dir / "assessor.json", results)
    with atomic_open(out_dir / "assessor.md") as f:
        f.write(render_markdown(results))
    return results
