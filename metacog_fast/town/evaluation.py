"""End-of-run evaluation: interviews of the agents and an LLM-as-judge over the
five criteria of paper 001, with every prompt and score saved.

Interview answers: ``text`` questions are answered by a short completion from
memories retrieved for the question; ``agents`` by ``choose`` over the other
agents' names (lettered list); ``scale`` by a 1-10 rating; ``yesno`` by
``choose`` over yes/no. The judge reads a transcript of the run (scenario,
metrics, sampled conversations, meta thoughts, goals and interview answers) and
rates each criterion 1-10 by ``choose`` over the ten numbers; the logprobs of
all ten are saved with the score.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from metacog_fast.town.generative import prompts as P
from metacog_fast.llm import BudgetExhausted
from metacog_fast.town.llm_adapter import RATINGS, rating_from

if TYPE_CHECKING:
    from metacog_fast.llm.protocol import LLM

CRITERIA: dict[str, str] = {
    "believability": "How believable and human-sounding are the agents' conversations and actions?",
    "learning": "Do the agents learn over time (new places, people, facts, and lessons from events)?",
    "goal_performance": "How well do the agents achieve their individual goals?",
    "higher_cognition": "Do the agents' observations and conversations turn into higher-level thoughts, "
                        "insights and strategies?",
    "scenario_performance": "How well did the agents do in the scenario itself (for a zombie apocalypse: how many "
                            "survived; for a party: how many attended; for a murder mystery: was the culprit named)?",
}
"""The five criteria (paper 001 §5)."""


METRIC_ANSWERS = ("agents",)
"""Answer types a scenario metric reads (the mystery's culprit question): asked even without the judge."""


def interview(sim: Any, answer_types: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Ask every scenario interview question (``answer_types``: only those of these answer types)
    to its agents (living ones; the dead cannot answer)."""
    out: list[dict[str, Any]] = []
    llm = sim.llm
    llm.max_calls = None  # the interview is outside the run's call budget
    names = [a.name for a in sim.agents]
    for q in sim.sc.interview_questions:
        if answer_types is not None and q.answer not in answer_types:
            continue
        for a in sim.agents:
            if not a.alive or (q.agents and a.name not in q.agents):
                continue
            mem = sim.memory.retrieve_text(a.name, [q.question], sim.cfg.agent.retrieve_k, sim.now())[0] \
                if sim.cfg.features.memory else []
            prompt = P.interview(a.head(sim.sc.description), a.name, q.question, mem)
            try:
                probs: dict[str, float] | None = None
                if q.answer == "agents":
                    others = [n for n in names if n != a.name]
                    ans, probs = choose_without_position_bias(llm, prompt, others, a.name, "interview")
                elif q.answer == "scale":
                    ans = llm.rate(f"{prompt} On a scale of 1 to 10, my answer is", "interview")
                elif q.answer == "yesno":
                    ans = ["yes", "no"][llm.choose(prompt, [" yes", " no"], "interview")]
                else:
                    ans = llm.text(prompt, "interview", max_tokens=sim.cfg.agent.answer_tokens)
            except BudgetExhausted:
                ans = None
            rec = {"agent": a.name, "question": q.question, "answer_type": q.answer, "answer": ans, "memories": mem}
            if probs is not None:
                rec["probabilities"] = probs
            out.append(rec)
    return out


def choose_without_position_bias(llm: Any, prompt: str, people: list[str], name: str,
                                 purpose: str) -> tuple[str | None, dict[str, float]]:
    """Ask ``name`` to pick one of ``people`` [n] from a lettered list, once per cyclic order of the
    list (n ``choose`` calls), and average each person's probability (softmax over the n letters)
    over the n orders. A small model mostly answers the first letter; in a fixed order that letter
    is always the same person (in the mystery, the murderer is listed first), so one order would
    measure the letter, not the suspicion. Returns (the most probable person, or None on an exact
    tie; {person: mean probability})."""
    if not people:
        raise ValueError("people: expected at least one name to choose from, got none")
    n = len(people)
    mean = [0.0] * n
    for k in range(n):
        order = list(range(k, n)) + list(range(k))
        res = llm.choice(f"{prompt}\nPeople:\n{P.lettered([people[i] for i in order])}\n{name} answers option",
                         P.letter_options(n), purpose)
        top = max(res.logprobs)
        w = [math.exp(x - top) for x in res.logprobs]
        z = sum(w)
        for pos, i in enumerate(order):
            mean[i] += w[pos] / z / n
    best = max(mean)
    winners = [i for i, p in enumerate(mean) if p == best]
    return (people[winners[0]] if len(winners) == 1 else None), {people[i]: round(mean[i], 6) for i in range(n)}


def culprit_named(answers: list[dict[str, Any]], murderer: str) -> dict[str, Any]:
    """Mystery metric: who named the murderer in the ``agents`` interview question (``rate``), and
    the mean probability they gave the murderer (``probability``, where the answers carry
    :func:`choose_without_position_bias`'s probabilities; ``chance`` is 1 / the number of people)."""
    named = [x for x in answers if x["answer_type"] == "agents" and x["agent"] != murderer]
    right = [x["agent"] for x in named if x["answer"] == murderer]
    out: dict[str, Any] = {"asked": len(named), "named_culprit": right,
                           "rate": len(right) / len(named) if named else 0.0}
    probs = [x["probabilities"] for x in named if x.get("probabilities")]
    if probs:
        out["probability"] = round(sum(p.get(murderer, 0.0) for p in probs) / len(probs), 6)
        out["chance"] = round(sum(1 / len(p) for p in probs) / len(probs), 6)
    return out


def transcript(run: dict[str, Any], answers: list[dict[str, Any]], max_lines: int = 6) -> str:
    """A short text summary of a run for the judge."""
    m = run["metrics"]
    lines = [f"Scenario: {run['scenario']['description']}",
             f"Agents: {m['agents']}, alive at the end: {m['alive']} after {m['steps']} steps."]
    if "attendance_rate" in m:
        lines.append(f"Party attendance: {len(m['attendance'])} of {m['agents'] - 1} guests.")
    if "culprit" in m:
        lines.append(f"Culprit named by {len(m['culprit']['named_culprit'])} of {m['culprit']['asked']} asked.")
    talk = [e["text"] for e in run["log"] if e["kind"] == "talk"][:max_lines]
    lines += ["Conversations:"] + [f"- {t}" for t in talk or ["(none)"]]
    thoughts = [f"{a['name']}: {e['text']}" for a in run["agents"] for e in a["timeline"]
                if e["kind"] in ("meta", "reflection", "strategy", "goal")][:max_lines]
    lines += ["Thoughts:"] + [f"- {t}" for t in thoughts or ["(none)"]]
    lines += ["Goals at the end:"] + [f"- {a['name']}: {a['goal'] or 'none'}" for a in run["agents"]]
    ia = [f"{x['agent']} to '{x['question']}': {x['answer']}" for x in answers][:max_lines]
    lines += ["Interview:"] + [f"- {t}" for t in ia or ["(none)"]]
    return "\n".join(lines)


def judge(llm: LLM, run: dict[str, Any], answers: list[dict[str, Any]]) -> dict[str, Any]:
    """Scores 1-10 per criterion with the prompts and the ten rating logprobs."""
    llm.max_calls = None
    text = transcript(run, answers)
    out: dict[str, Any] = {}
    for key, question in CRITERIA.items():
        prompt = (f"You are a strict judge of a simulation of generative agents.\n{text}\n"
                  f"Criterion: {question}\nScore from 1 (very poor) to 10 (excellent):")
        try:
            res = llm.choice(prompt, RATINGS, "judge")
            out[key] = {"score": rating_from(res.logprobs), "expected": expected_rating(res.logprobs), "prompt": prompt,
                        "logprobs": [round(x, 4) for x in res.logprobs]}
        except BudgetExhausted:
            out[key] = {"score": None, "prompt": prompt, "logprobs": None}
    scores = [v["score"] for v in out.values() if v["score"] is not None]
    out["mean"] = sum(scores) / len(scores) if scores else None
    return out


def expected_rating(logprobs: list[float]) -> float:
    """Mean rating under the judge's distribution over the ten answers (softmax of their logprobs):
    a graded score where the argmax of a small model is stuck on one number."""
    m = max(logprobs)
    w = [math.exp(x - m) for x in logprobs]
    return round(sum((i + 1) * wi for i, wi in enumerate(w)) / sum(w), 4)


ABLATION_PER_RUN = ("survival_rate", "attendance_rate", "attendance_informed_rate", "culprit_rate", "culprit_probability", "judge_mean",
                    "judge_expected")
"""Per-run values compared between configurations, paired by seed."""

JUDGE_SCORES = ("judge_mean", "judge_expected")
"""The judge's per-run scores (1-10): the mean of the five rounded criterion scores, and the mean of
the five expected ratings under the judge's distribution over the ten answers."""


def _rate_counts(m: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """metric -> (successes, trials) of one run's metrics: survivors / agents, guests who attended /
    guests, agents who named the murderer / agents asked, runs where the detective accused the
    murderer during the run / runs."""
    out = {"survival": (int(m["alive"]), int(m["agents"]))}
    if "attendance_rate" in m:
        out["attendance"] = (len(m.get("attendance", [])), int(m["agents"]) - 1)
    if "attendance_informed_rate" in m:
        out["attendance_informed"] = (len(m.get("attendance_informed", [])), int(m["agents"]) - 1)
    if "culprit" in m:
        out["culprit"] = (len(m["culprit"]["named_culprit"]), int(m["culprit"]["asked"]))
    if "detective_accused_culprit" in m:
        out["detective_accused"] = (int(bool(m["detective_accused_culprit"])), 1)
    return out


def informed_attendance(run: dict[str, Any]) -> list[str]:
    """Guests of a party run (``run.json``) who were at the party's place during its window while
    knowing of it (invited or told before or at that step), recomputed from the frames and the log:
    the same as the run's ``metrics["attendance_informed"]``, for records written before it existed.
    Plain attendance counts any guest in the place, and agents without planning wander in."""
    rules = run["scenario"]["rules"]
    if rules.get("type") != "party":
        raise ValueError(f"run: expected a party run, got rules type {rules.get('type')!r}")
    loc = next((l for l in run["world"]["locations"] if l["name"] == rules["location"]), None)
    if loc is None:
        raise ValueError(f"run: the party's place {rules['location']!r} is not a location of its world")
    x0, y0, x1, y1 = loc["bounds"]
    knew = {n: 0 for n in rules.get("invited", [])}
    for e in run["log"]:
        if e["kind"] == "invite" and " invited " in e["text"]:
            guest = e["text"].split(" invited ", 1)[1].split(" to the Christmas party", 1)[0]
            knew.setdefault(guest, e["step"])
    s0, dur = rules["start_step"], rules["duration_steps"]
    out: set[str] = set()
    for f in run["frames"]:
        if not s0 <= f["step"] - 1 < s0 + dur:  # frame k holds the positions after step k - 1 acted
            continue
        for a in f["agents"]:
            n = a["name"]
            if (n != rules["host"] and a["alive"] and x0 <= a["x"] <= x1 and y0 <= a["y"] <= y1
                    and n in knew and knew[n] <= f["step"]):
                out.add(n)
    return sorted(out)


def _per_run_value(s: dict[str, Any], key: str) -> float | None:
    if key == "culprit_rate":
        return s["metrics"]["culprit"]["rate"] if "culprit" in s["metrics"] else None
    if key == "culprit_probability":
        return s["metrics"].get("culprit", {}).get("probability")
    if key in ("judge_mean", "judge_expected"):
        return s.get(key)
    return s["metrics"].get(key)


def ablation_statistics(results: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Intervals and paired comparisons of an ablation (docs/statistics.md).

    ``results``: config -> run summaries (``summary.json`` of each ``<config>_run<i>``, with
    ``seed`` and ``metrics``). Returns ``rates``: config -> {survival / attendance / culprit /
    detective_accused: Wilson
    interval dict pooled over the config's runs (agents of one run are not independent, so read the
    interval as optimistic)}; ``scores``: config -> {judge_mean / judge_expected: mean over runs with
    its bootstrap interval over runs (seeds)}; ``comparisons``: metric -> every pair of configs,
    paired by seed (the runs of one seed share the town and its randomness)."""
    from metacog_fast.metrics import mean_interval, pairwise_comparisons, wilson_interval

    if not results:
        raise ValueError("results: expected at least one configuration with runs, got none")
    rates: dict[str, dict[str, Any]] = {}
    for name, runs in results.items():
        if not runs:
            raise ValueError(f"results: configuration {name!r} has no runs")
        tot: dict[str, list[int]] = {}
        for s in runs:
            for k, (ok, n) in _rate_counts(s["metrics"]).items():
                t = tot.setdefault(k, [0, 0])
                t[0], t[1] = t[0] + ok, t[1] + n
        rates[name] = {}
        for k, (ok, n) in tot.items():
            lo, hi = wilson_interval(ok, n) if n else (None, None)
            rates[name][k] = {"rate": ok / n if n else None, "low": lo, "high": hi, "successes": ok, "n": n,
                              "runs": len(runs)}
    scores: dict[str, dict[str, Any]] = {}
    for name, runs in results.items():
        for key in JUDGE_SCORES:
            vals = [v for s in runs if (v := _per_run_value(s, key)) is not None]
            if vals:
                scores.setdefault(name, {})[key] = mean_interval(vals)
    comparisons: dict[str, list[dict[str, Any]]] = {}
    for key in ABLATION_PER_RUN:
        per_seed = {name: {s["seed"]: v for s in runs if (v := _per_run_value(s, key)) is not None}
                    for name, runs in results.items()}
        if len(per_seed) > 1 and all(per_seed.values()):
            comparisons[key] = pairwise_comparisons(per_seed, key)
    return {"rates": rates, "scores": scores, "comparisons": comparisons}


def ablation_statistics_markdown(stats: dict[str, Any]) -> str:
    """The scenario rates with Wilson intervals, then the paired comparisons per metric."""
    from metacog_fast.metrics import comparisons_markdown

    kinds = list(dict.fromkeys(k for r in stats["rates"].values() for k in r))
    L = ["", "## Scenario rates (Wilson 95 % interval, pooled over runs)", "",
         "Agents of one run share a town, so they are not independent: read the intervals as optimistic.", "",
         "| config | runs | " + " | ".join(kinds) + " |", "|---|---|" + "---|" * len(kinds)]
    for name, r in stats["rates"].items():
        cells = []
        for k in kinds:
            x = r.get(k)
            cells.append("-" if not x or x["rate"] is None else
                         f"{100 * x['rate']:.0f}% [{100 * x['low']:.0f}%, {100 * x['high']:.0f}%] "
                         f"({x['successes']}/{x['n']})")
        runs = next(iter(r.values()))["runs"] if r else 0
        L.append(f"| {name} | {runs} | " + " | ".join(cells) + " |")
    scores = stats.get("scores") or {}
    if scores:
        L += ["", "## Judge scores (mean over runs, 95 % bootstrap interval over seeds)", "",
              "| config | runs | " + " | ".join(JUDGE_SCORES) + " |", "|---|---|" + "---|" * len(JUDGE_SCORES)]
        for name, sc in scores.items():
            n = next(iter(sc.values()))["n"]
            L.append(f"| {name} | {n} | " + " | ".join(
                f"{sc[k]['mean']:.2f} [{sc[k]['low']:.2f}, {sc[k]['high']:.2f}]" if k in sc else "-"
                for k in JUDGE_SCORES) + " |")
    for key, rows in stats["comparisons"].items():
        pct = key.endswith("_rate")
        L += comparisons_markdown(rows, f"Paired comparisons: {key}{' (percentage points)' if pct else ''}", "seed",
                                  scale=100.0 if pct else 1.0, nd=1 if pct else 2)
    return "\n".join(L) + "\n"


def plot_ablation_statistics(stats: dict[str, Any], path: str, title: str = "") -> str:
    """ablation.png of :func:`ablation_statistics`: left, the scenario rates per configuration with
    their Wilson intervals (in %); right, the judge's mean score (1-10) per configuration with its
    bootstrap interval over seeds. Written atomically; returns ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import numpy as np
    from matplotlib.figure import Figure

    from metacog_fast.metrics.plots import _save_atomic

    rates, scores = stats.get("rates") or {}, stats.get("scores") or {}
    if not rates:
        raise ValueError("stats: expected 'rates' with at least one configuration, got none")
    configs = list(rates)
    kinds = list(dict.fromkeys(k for r in rates.values() for k in r))
    fig = Figure(figsize=(9.0, 3.8))
    ax_r, ax_s = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    width = 0.8 / len(configs)
    x = np.arange(len(kinds))
    for i, name in enumerate(configs):
        vals = [rates[name].get(k) or {} for k in kinds]
        ok = [v.get("rate") is not None for v in vals]
        r = np.array([100 * v["rate"] if o else np.nan for v, o in zip(vals, ok)])
        lo = np.array([100 * v["low"] if o else np.nan for v, o in zip(vals, ok)])
        hi = np.array([100 * v["high"] if o else np.nan for v, o in zip(vals, ok)])
        xs = x + (i - (len(configs) - 1) / 2) * width
        ax_r.bar(xs, r, width, label=name)
        ax_r.errorbar(xs, r, yerr=np.vstack([r - lo, hi - r]), fmt="none", ecolor="black", capsize=3, lw=1)
    ax_r.set_xticks(x)
    ax_r.set_xticklabels(kinds)
    ax_r.set_ylim(0, 105)
    ax_r.set_ylabel("% of agents (of runs for detective_accused), Wilson 95 %", fontsize=8)
    ax_r.legend(fontsize=8)
    judged = [n for n in configs if "judge_mean" in scores.get(n, {})]
    if judged:
        m = np.array([scores[n]["judge_mean"]["mean"] for n in judged])
        lo = np.array([scores[n]["judge_mean"]["low"] for n in judged])
        hi = np.array([scores[n]["judge_mean"]["high"] for n in judged])
        ax_s.bar(np.arange(len(judged)), m, 0.6, color=[f"C{configs.index(n)}" for n in judged])
        ax_s.errorbar(np.arange(len(judged)), m, yerr=np.vstack([m - lo, hi - m]), fmt="none", ecolor="black",
                      capsize=3, lw=1)
        ax_s.set_xticks(np.arange(len(judged)))
        ax_s.set_xticklabels(judged, fontsize=8)
        ax_s.set_ylim(1, 10)
        ax_s.set_ylabel("judge score, mean of 5 criteria (95 % CI)")
    else:
        ax_s.text(0.5, 0.5, "no judge scores", ha="center", va="center", transform=ax_s.transAxes)
        ax_s.set_axis_off()
    if title:
        fig.suptitle(title)
    _save_atomic(fig, path)
    return path
