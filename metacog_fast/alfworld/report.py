"""Metrics, the paper's Tables 2-5, Type-2 ROC plots and costs of one or more agent runs.

``report(root)`` reads every run folder under ``root`` (a folder with ``config.json`` and
``episodes/``), computes per agent and per task type:

* success rate: mean over games of the per-game success over its test episodes (docs/design.md §3),
  with the Wilson 95 % interval of the test episodes' successes (``success``);
* mean steps per test episode with 100 charged for a failure;
* AUROC2 and metacognitive accuracy (threshold 0.5) of chunk-wise M_sa predictions on test
  episodes (MUSE agents): with the pre-deployment g_eta ("No Adaptation") and the adapted one;
  AUROC2 with its cluster-bootstrap interval over episodes and the distinct successful / failed
  episodes, undefined below 5 of either (``auroc2_<cond>_ci``), and within task type
  (``auroc2_<cond>_within_type``);
* costs per episode: LLM calls, prompt/completion tokens, LLM / env / agent seconds;
* MUSE's room for selection (``selection``): steps whose rollouts began with different actions,
  and steps whose executed action was not the first rollout's; with a greedy candidate
  (``greedy_candidate``), the steps on which the margin rule replaced the greedy action;
* MUSE's competence trigger (``trigger``): firings per test episode, by what they changed;
* every pair of agents compared on per-game success (paired bootstrap over the games both
  played: difference, interval, p; ``comparisons``);
* the paper's claims about the ordering of the agents (``PAPER_CLAIMS``) tested as stated on the
  same per-game success (``claims``; metrics/claims.py says what each relation needs);
* metacognitive accuracy with its cluster-bootstrap interval over episodes
  (``meta_accuracy_<cond>_ci``);

only over games whose test episodes are all recorded: a run still playing (runs span sessions) is
reported on its finished games, and Table 3 says how many of the planned games those are;

and writes ``report.json`` and ``tables.md`` (atomically), ``roc_<agent>.png`` and
``success_rates.png`` (per task type, Wilson error bars). docs/statistics.md defines the statistics.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from metacog_fast._atomic import atomic_open
from metacog_fast.alfworld.store import read_json, write_json_atomic


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


def _per_game(test: list[dict[str, Any]]) -> dict[str, float]:
    """game -> success rate over its test episodes."""
    by_game: dict[str, list[float]] = {}
    for r in test:
        by_game.setdefault(r["game"], []).append(float(bool(r["won"])))
    return {g: float(np.mean(v)) for g, v in by_game.items()}


def _game_success(test: list[dict[str, Any]]) -> float:
    per = _per_game(test)
    return float(np.mean(list(per.values()))) if per else float("nan")


def complete_games(recs: list[dict[str, Any]], per_game: int, phase: str = "test") -> tuple[list[dict[str, Any]], int]:
    """The records of games that have all ``per_game`` episodes of ``phase``, and how many
    ``phase`` episodes belong to games still in progress (left out: a game's success is defined
    over all its test episodes, and a run that spans sessions is reported while it plays)."""
    counts: dict[str, int] = {}
    for r in recs:
        if r["phase"] == phase:
            counts[r["game"]] = counts.get(r["game"], 0) + 1
    keep = {g for g, n in counts.items() if n >= per_game}
    out = [r for r in recs if r["game"] in keep]
    return out, sum(n for g, n in counts.items() if g not in keep)


def summarize(recs: list[dict[str, Any]], phase: str = "test", adapted: bool = True) -> dict[str, Any]:
    """Metrics of one agent's records of ``phase``. ``adapted``: the run had adaptation episodes
    (without them the adapted g_eta is the pre-deployment one, so only "no_adaptation" is reported)."""
    from metacog_fast.metrics import (
        accuracy_clustered,
        auroc2_clustered,
        auroc2_within_types,
        mean_steps_charged,
        metacognitive_accuracy,
        success_interval,
    )

    sel = [r for r in recs if r["phase"] == phase]
    out: dict[str, Any] = {"episodes": len(sel), "games": len({r["game"] for r in sel})}
    if not sel:
        return out
    won = np.array([bool(r["won"]) for r in sel])
    out["success_rate"] = _game_success(sel)
    out["success"] = success_interval(won).to_dict()
    out["per_game_success"] = _per_game(sel)
    out["mean_steps_charged"] = float(mean_steps_charged(np.array([r["steps"] for r in sel]), won))
    out["per_type"] = {}
    for t in sorted({r["task_type"] for r in sel}):
        st = [r for r in sel if r["task_type"] == t]
        wt = np.array([bool(r["won"]) for r in st])
        out["per_type"][t] = {"success_rate": _game_success(st), "success": success_interval(wt).to_dict(),
                              "mean_steps_charged": float(mean_steps_charged(np.array([r["steps"] for r in st]), wt)),
                              "episodes": len(st)}
    conds = (("chunk_probs_pre", "no_adaptation"), ("chunk_probs", "adaptation")) if adapted else \
        (("chunk_probs_pre", "no_adaptation"),)
    for key, name in conds:
        probs, labels, eps, types = [], [], [], []
        for r in sel:
            for p in r.get(key, []) or []:
                probs.append(p)
                labels.append(float(bool(r["won"])))
                eps.append(f"{r['game']}#{r['episode']}")
                types.append(r["task_type"])
        if probs:
            y = np.array(labels)
            ci = auroc2_clustered(np.array(probs), y, eps)
            out[f"auroc2_{name}"] = ci.value  # None when undefined (fewer than 5 successful or failed episodes)
            out[f"auroc2_{name}_ci"] = ci.to_dict()
            out[f"auroc2_{name}_within_type"] = auroc2_within_types(np.array(probs), y, eps, types).to_dict()
            out[f"meta_accuracy_{name}"] = float(metacognitive_accuracy(np.array(probs), y))
            out[f"meta_accuracy_{name}_ci"] = accuracy_clustered(np.array(probs), y, eps)
            out[f"chunks_{name}"] = len(probs)
            out[f"_probs_{name}"] = (probs, labels, ci)
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
    effect = adaptation_effect(recs)
    if effect:
        out["adaptation_effect"] = effect
    selection = selection_counts([s for r in sel for s in r["step_log"]])
    if selection:
        out["selection"] = selection
    trig = trigger_counts(sel)
    if trig:
        out["trigger"] = trig
    return out


def adaptation_effect(recs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What the adaptation episodes (and the reflections written after them) did to each game, from
    the records of games with a first adaptation episode and test episodes (None without any):
    games won / failed at the first attempt (adaptation episode 0, before any reflection), how many
    of them were won in every / some / no test episode, and the change of the per-game success from
    the first attempt to the test episodes, paired by game (bootstrap interval, two-sided p)."""
    from metacog_fast.metrics import compare_paired

    first = {r["game"]: float(bool(r["won"])) for r in recs if r["phase"] == "adapt" and r["episode"] == 0}
    test = {g: v for g, v in _per_game([r for r in recs if r["phase"] == "test"]).items() if g in first}
    if not test:
        return None
    out: dict[str, Any] = {"games": len(test)}
    for name, was in (("first_won", 1.0), ("first_failed", 0.0)):
        rates = [test[g] for g in test if first[g] == was]
        out[name] = {"games": len(rates), "tests_all_won": sum(x == 1.0 for x in rates),
                     "tests_some_won": sum(0.0 < x < 1.0 for x in rates), "tests_none_won": sum(x == 0.0 for x in rates)}
    out["change"] = compare_paired(test, {g: first[g] for g in test}).to_dict()
    return out


def selection_counts(step_log: list[dict[str, Any]]) -> dict[str, Any] | None:
    """How much room MUSE's selection had (steps with rollouts; None without any): on how many
    steps the rollouts' (mapped) first actions differed, so that the scores could change the action,
    and on how many the executed action is not rollout 0's (the one an agent without M_sa, taking
    its first sample, would have executed). Steps of MUSE-random that decoded only their pick
    (``decode_only_pick``) had no rollouts to compare and are left out."""
    steps = [s for s in step_log if s.get("rollouts") and not s.get("decoded_only_pick")]
    if not steps:
        return None
    firsts = [[ro[0][0] for ro in s["rollouts"] if ro] for s in steps]
    distinct = [len(set(f)) for f in firsts]
    return {"steps": len(steps),
            "steps_with_choice": sum(d >= 2 for d in distinct),
            "mean_distinct_first_actions": float(np.mean(distinct)),
            "steps_not_first_sample": sum(bool(f) and s.get("action") != f[0] for s, f in zip(steps, firsts)),
            **_greedy_counts(steps)}


def _greedy_counts(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Steps with a greedy candidate 0 (``greedy_replaced`` recorded): on how many the margin rule
    replaced it, and on how many of those the executed action differs from the greedy one."""
    g = [s for s in steps if "greedy_replaced" in s]
    if not g:
        return {}
    return {"steps_greedy": len(g), "steps_greedy_replaced": sum(bool(s["greedy_replaced"]) for s in g),
            "steps_greedy_action_changed": sum(bool(s.get("greedy_action_changed")) for s in g)}


def trigger_counts(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """MUSE's competence-trigger firings (steps with a ``trigger`` entry) in ``records``: the episodes
    played with the trigger on (steps recording ``competence_low_steps``), total firings, firings per
    episode (mean, max), episodes with at least one, and firings by action. None when no episode
    had the trigger on."""
    on = [r for r in records if any("competence_low_steps" in s for s in r["step_log"])]
    if not on:
        return None
    per = [sum(1 for s in r["step_log"] if s.get("trigger")) for r in on]
    by: dict[str, int] = {}
    for r in on:
        for s in r["step_log"]:
            if s.get("trigger"):
                by[s["trigger"]["action"]] = by.get(s["trigger"]["action"], 0) + 1
    return {"episodes": len(on), "firings": int(sum(per)), "per_episode_mean": float(np.mean(per)),
            "per_episode_max": int(max(per)), "episodes_with_firing": sum(k > 0 for k in per),
            "won_with_firing": sum(bool(r["won"]) for r, k in zip(on, per) if k > 0),
            "by_action": by}


def _pct(x: Any) -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.0f}%"


def _num(x: Any, spec: str = ".1f") -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else format(x, spec)


def report(root: str | Path, out: str | Path | None = None) -> dict[str, Any]:
    """Compute everything for the runs under ``root``; write report.json, tables.md, ROC plots and
    success_rates.png."""
    from metacog_fast.metrics import (
        Auroc2Result,
        evaluate_claims,
        pairwise_comparisons,
        plot_rates_with_intervals,
        plot_type2_roc,
    )

    root = Path(root)
    out_dir = Path(out) if out else root
    agents: dict[str, dict[str, Any]] = {}
    for run in find_runs(root):
        cfg, recs = load_run(run)
        c = cfg["config"]
        label = run_label(c, agents)
        per_game = c.get("test_episodes")
        in_progress = 0
        if isinstance(per_game, int) and per_game > 0:
            recs, in_progress = complete_games(recs, per_game)
        summ = summarize(recs, "test", adapted=c["adapt_episodes"] > 0)
        planned = len(cfg.get("games") or [])
        if planned:
            summ["games_planned"] = planned
        summ["episodes_in_progress"] = in_progress
        summ["adapt_episodes"] = c["adapt_episodes"]
        summ["config"] = c
        summ["run"] = str(run)
        if "_probs_adaptation" in summ or "_probs_no_adaptation" in summ:
            for name in ("no_adaptation", "adaptation"):
                pl = summ.pop(f"_probs_{name}", None)
                if pl and 0 < sum(pl[1]) < len(pl[1]):
                    ci: Auroc2Result = pl[2]
                    p = plot_type2_roc(pl[0], pl[1], out_dir / f"roc_{label}_{name}.png",
                                       title=f"Type-2 ROC, {label}, {name.replace('_', ' ')}", result=ci)
                    summ[f"roc_{name}"] = str(p)
        agents[label] = summ
    order = ordered(agents)
    per_game = {a: agents[a]["per_game_success"] for a in order if "per_game_success" in agents[a]}
    res: dict[str, Any] = {"agents": agents, "comparisons": pairwise_comparisons(per_game, "per-game success rate"),
                           "claims": evaluate_claims(per_game, PAPER_CLAIMS)}
    if any(a.endswith(ONFAIL_SUFFIX) for a in per_game):
        res["claims_onfail"] = evaluate_claims(per_game, ONFAIL_CLAIMS)
    rates = {a: {"all": agents[a]["success"], **{t: v["success"] for t, v in agents[a].get("per_type", {}).items()}}
             for a in order if "success" in agents[a]}
    if rates:
        res["success_plot"] = str(plot_rates_with_intervals(
            rates, out_dir / "success_rates.png", title="Success rate per task type (Wilson 95 % interval)"))
    tables = render_tables(agents, res["comparisons"], res["claims"], res.get("claims_onfail"))
    write_json_atomic(out_dir / "report.json", res)
    with atomic_open(out_dir / "tables.md") as f:
        f.write(tables)
    return res


AGENT_ORDER = ("react", "reflexion", "reflexion+sl", "fcrf", "muse-lowest", "muse-random", "muse")

PAPER_CLAIMS = (
    "muse >> reflexion > react",
    "muse > reflexion+sl > reflexion",
    "muse > muse-random",
    "muse > muse-lowest",
)
"""The orderings of paper 000's Table 3 (MUSE 84/90 %, MUSE-random 68/69 %, Reflexion with supervised
learning 62/65 %, MUSE-lowest 59/61 %, Reflexion 45/51 %, ReAct 35 %), as report row labels."""

ONFAIL_SUFFIX = "-onfail"
ONFAIL_CLAIMS = (
    "muse-onfail >> reflexion-onfail > react",
    "muse-onfail > reflexion+sl-onfail > reflexion-onfail",
)
"""The same orderings among the agents that reflect only after a failed episode (``--reflect-on
failure``; ``<agent>-onfail`` labels), beyond the paper: tested when any such agent is in the report."""


def run_label(config: dict[str, Any], taken: dict[str, Any]) -> str:
    """A run's row label: its agent name, or ``<agent>+adapt<n>`` when a run of the same agent is
    already in the report (e.g. MUSE without and with adaptation episodes under one folder); a run's
    own ``label`` replaces the agent name."""
    label = config.get("label") or config["agent"]
    if label in taken:
        label = f"{label}+adapt{config['adapt_episodes']}"
    k = 2
    base = label
    while label in taken:
        label, k = f"{base}#{k}", k + 1
    return label


def ordered(agents: dict[str, Any]) -> list[str]:
    """Row order: the paper's agents in their order, then any further runs under their labels."""
    rank = {a: i for i, a in enumerate(AGENT_ORDER)}
    return sorted(agents, key=lambda a: (rank.get(a.split("+")[0].split("#")[0], len(rank)), a))


def _bracket(x: dict[str, Any] | None) -> str:
    """`` [5%, 45%] (2/12)`` from a success interval dict (its Wilson interval); empty without one."""
    if not x:
        return ""
    return f" [{100 * x['low']:.0f}%, {100 * x['high']:.0f}%] ({x['successes']}/{x['n']})"


def _rate(x: dict[str, Any] | None) -> str:
    """``17% [5%, 45%] (2/12)`` from a success interval dict; — without one."""
    return f"{100 * x['rate']:.0f}%{_bracket(x)}" if x else "—"


def _episodes(s: dict[str, Any]) -> str:
    """``120`` for a finished run; ``26 (13 of 60 games; run in progress; 1 episode of unfinished
    games left out)`` for one still playing."""
    n, games, planned = s.get("episodes", 0), s.get("games", 0), s.get("games_planned")
    left = s.get("episodes_in_progress", 0)
    if (planned is None or games >= planned) and not left:
        return str(n)
    parts = [f"{games} of {planned} games" if planned else f"{games} games", "run in progress"]
    if left:
        parts.append(f"{left} episode{'s' if left != 1 else ''} of unfinished games left out")
    return f"{n} ({'; '.join(parts)})"


def _auroc(x: dict[str, Any] | None) -> str:
    """``0.62 [0.41, 0.80]`` or ``undefined (n positives = 1 < 5)`` from an Auroc2Result dict."""
    if not x:
        return "—"
    if not x["defined"]:
        return f"undefined ({x['reason']})"
    return f"{x['value']:.2f} [{x['low']:.2f}, {x['high']:.2f}]"


def render_tables(agents: dict[str, dict[str, Any]], comparisons: list[dict[str, Any]] | None = None,
                  claims: list[dict[str, Any]] | None = None,
                  claims_onfail: list[dict[str, Any]] | None = None) -> str:
    """Markdown in the form of the paper's Tables 2-5, per-type tables and costs (one row per run:
    the paper's agents in their order, then any further runs of an agent under their labels), with
    Wilson intervals on success rates, AUROC2 intervals with episode counts, and the paired
    comparisons of every pair of agents."""
    from metacog_fast.metrics import claims_markdown, comparisons_markdown, p_cell

    order = ordered(agents)
    L: list[str] = []

    def col(a: str, key: str, fmt: Any) -> tuple[str, str]:
        s = agents[a]
        v = fmt(s.get(key))
        return (v, "—") if s["adapt_episodes"] == 0 else ("—", v)

    L.append("## Table 2: self-assessment (MUSE, chunk-wise M_sa on test episodes)\n")
    L.append("AUROC2 with its 95 % cluster-bootstrap interval over episodes; undefined when fewer than 5 "
             "successful or failed episodes. Within type: only a success and a failure of the same task type "
             "are compared.\n")
    L.append("| Agent | Condition | AUROC2 | successful / failed episodes | AUROC2 within type | "
             "Metacognitive accuracy | chunks |\n|---|---|---|---|---|---|---|")
    for a in order:
        s = agents[a]
        for name, cond in (("no_adaptation", "No Adaptation (pre-deployment g_eta)"), ("adaptation", "Adaptation")):
            if f"chunks_{name}" in s:
                ci = s.get(f"auroc2_{name}_ci")
                wt = (s.get(f"auroc2_{name}_within_type") or {}).get("pooled")
                auc = _auroc(ci) if ci else _num(s.get(f"auroc2_{name}"), ".2f")
                counts = f"{ci['positives']} / {ci['negatives']}" if ci else "—"
                acc = s.get(f"meta_accuracy_{name}_ci")
                acc_text = _pct(s.get(f"meta_accuracy_{name}")) + (
                    f" [{100 * acc['low']:.0f}%, {100 * acc['high']:.0f}%]" if acc else "")
                L.append(f"| {a} | {cond} | {auc} | {counts} | {_auroc(wt)} | {acc_text} | {s[f'chunks_{name}']} |")
    L.append("\n## Table 3: success rate on the deployment games\n")
    L.append("Mean over games of the per-game success; in brackets the Wilson 95 % interval of the test "
             "episodes' successes (successes/episodes).\n")
    L.append("| Agent | No Adaptation | Adaptation | test episodes |\n|---|---|---|---|")
    for a in order:
        na, ad = col(a, "success_rate", _pct)
        ci = agents[a].get("success")
        if ci:
            na, ad = (na + _bracket(ci), ad) if ad == "—" else (na, ad + _bracket(ci))
        L.append(f"| {a} | {na} | {ad} | {_episodes(agents[a])} |")
    L.append("\n## Table 4: mean steps per episode (100 charged for a failure)\n")
    L.append("| Agent | No Adaptation | Adaptation |\n|---|---|---|")
    for a in order:
        na, ad = col(a, "mean_steps_charged", lambda x: _num(x, ".0f"))
        L.append(f"| {a} | {na} | {ad} |")
    L.append("\n## Table 5: success rate with a small LLM\n")
    actors = sorted({str(agents[a]["config"].get("llm") or "SmolLM2-135M-Instruct (Q4_1)")
                     for a in order if "config" in agents[a]}) or ["SmolLM2-135M-Instruct (Q4_1)"]
    L.append(f"| Agent | actor: {', '.join(actors)} |\n|---|---|")
    for a in order:
        ci = agents[a].get("success")
        L.append(f"| {a} | {_pct(agents[a].get('success_rate'))}{_bracket(ci)} |")
    types = sorted({t for a in order for t in agents[a].get("per_type", {})})
    L.append("\n## Success rate per task type\n")
    L.append("Wilson 95 % interval and successes/episodes in brackets.\n")
    L.append("| Agent | " + " | ".join(types) + " |\n|---|" + "---|" * len(types))
    for a in order:
        pt = agents[a].get("per_type", {})
        L.append(f"| {a} | " + " | ".join(
            _rate(pt[t].get("success")) if t in pt and pt[t].get("success") else _pct(pt.get(t, {}).get("success_rate"))
            for t in types) + " |")
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
    eff_rows = [a for a in order if agents[a].get("adaptation_effect")]
    if eff_rows:
        L.append("\n## What adaptation did: the first attempt against the test episodes\n")
        L.append("Per game, the first adaptation episode (before any reflection) against its test episodes: "
                 "games won at the first attempt and then won in every / some / no test episode, the same for "
                 "games failed at the first attempt, and the change of the per-game success from the first "
                 "attempt to the tests (percentage points, paired bootstrap over games).\n")
        L.append("| Agent | games | first won: tests all / some / none won | first failed: tests all / some / none won "
                 "| test − first attempt | 95 % interval | p |\n|---|---|---|---|---|---|---|")
        for a in eff_rows:
            e = agents[a]["adaptation_effect"]
            w, f, c = e["first_won"], e["first_failed"], e["change"]
            interval = f"[{100 * c['low']:+.1f}, {100 * c['high']:+.1f}]" if c.get("defined") else "—"
            diff = f"{100 * c['diff']:+.1f}" if c.get("defined") else "—"
            L.append(f"| {a} | {e['games']} | {w['games']}: {w['tests_all_won']} / {w['tests_some_won']} / "
                     f"{w['tests_none_won']} | {f['games']}: {f['tests_all_won']} / {f['tests_some_won']} / "
                     f"{f['tests_none_won']} | {diff} | {interval} | {p_cell(c.get('p_value'), c.get('resamples', 10000))} |")
    sel_rows = [a for a in order if agents[a].get("selection")]
    if sel_rows:
        L.append("\n## MUSE's selection (test steps)\n")
        L.append("Steps on which the rollouts' first actions differed (only there can the scores change the action), "
                 "the mean number of distinct first actions among the rollouts, and the steps on which the executed "
                 "action is not the first rollout's.\n")
        L.append("| Agent | steps | with a choice | distinct first actions | executed ≠ rollout 0 |\n|---|---|---|---|---|")
        for a in sel_rows:
            c = agents[a]["selection"]
            n = c["steps"]
            L.append(f"| {a} | {n} | {c['steps_with_choice']} ({100 * c['steps_with_choice'] / n:.0f}%) | "
                     f"{c['mean_distinct_first_actions']:.2f} | {c['steps_not_first_sample']} "
                     f"({100 * c['steps_not_first_sample'] / n:.0f}%) |")
    greedy_rows = [a for a in sel_rows if agents[a]["selection"].get("steps_greedy")]
    if greedy_rows:
        L.append("\nWith a greedy candidate 0: steps on which another candidate's score beat the greedy one's by the "
                 "margin (`select_margin`), and those on which that changed the executed action.\n")
        L.append("| Agent | steps | greedy replaced | action changed |\n|---|---|---|---|")
        for a in greedy_rows:
            c = agents[a]["selection"]
            n = c["steps_greedy"]
            L.append(f"| {a} | {n} | {c['steps_greedy_replaced']} ({100 * c['steps_greedy_replaced'] / n:.0f}%) | "
                     f"{c['steps_greedy_action_changed']} |")
    trig_rows = [a for a in order if agents[a].get("trigger")]
    if trig_rows:
        L.append("\n## MUSE's competence trigger (test episodes)\n")
        L.append("Firings: the best candidate's M_sa score stayed below `trigger_threshold` for `trigger_steps` steps.\n")
        L.append("| Agent | episodes | firings | per episode (mean / max) | episodes with a firing (won) | by action |"
                 "\n|---|---|---|---|---|---|")
        for a in trig_rows:
            t = agents[a]["trigger"]
            by = ", ".join(f"{k} {v}" for k, v in sorted(t["by_action"].items())) or "—"
            L.append(f"| {a} | {t['episodes']} | {t['firings']} | {t['per_episode_mean']:.2f} / {t['per_episode_max']} | "
                     f"{t['episodes_with_firing']} ({t['won_with_firing']}) | {by} |")
    if claims:
        L += claims_markdown(claims, "The paper's claims, tested as stated (per-game success)", "game")
    if claims_onfail:
        L += claims_markdown(claims_onfail, "The same claims among agents reflecting only after failures "
                             "(beyond the paper; per-game success)", "game")
    if comparisons:
        L += comparisons_markdown(comparisons, "Paired comparisons: per-game success rate (percentage points)",
                                  "game", scale=100.0, nd=1)
    return "\n".join(L) + "\n"
