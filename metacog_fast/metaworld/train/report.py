"""Results of the Meta-World protocol: metrics per agent (docs/design.md §3), JSON/CSV per run, Table 1
of paper 000 in the same form (markdown), the per-task steps-to-success bar chart (MUSE vs
Dreamer, solved / unsolved) and the Type-2 ROC curve (PNG).

Uncertainty (docs/statistics.md): success rates with Wilson intervals over episodes (``success``,
per task ``success_interval``; ``success_rates.png`` with error bars), AUROC2 with a cluster
bootstrap over episodes and the distinct successful / failed episodes (``auroc2_ci``; undefined,
with ``auroc2`` NaN and the reason in ``auroc2_note``, below 5 of either), AUROC2 within task
(``auroc2_within_task``), and every pair of runs compared on per-task success by a paired
bootstrap over the tasks both ran (``comparisons.json``, in table1.md)."""
from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from metacog_fast.metrics import (
    MIN_EPISODES,
    Auroc2Result,
    auroc2_clustered,
    auroc2_within_types,
    comparisons_markdown,
    mean_steps_to_success,
    metacognitive_accuracy,
    pairwise_comparisons,
    plot_rates_with_intervals,
    plot_type2_roc,
    success_interval,
    success_rate,
    tasks_solved,
)
from metacog_fast.metaworld.train.checkpoint import atomic_write_bytes, atomic_write_json
from metacog_fast.metaworld.train.config import ProtocolConfig
from metacog_fast.metaworld.train.runner import load_adaptation_steps, read_state


def evaluate_run(run_dir: str | Path, cfg: ProtocolConfig) -> dict[str, Any]:
    """Metrics of one finished (or partial) run from its adaptation episodes on disk."""
    eps = load_adaptation_steps(run_dir, cfg.novel_tasks, cfg.model.N)
    if not eps:
        raise ValueError(f"run_dir: {run_dir} has no adaptation episodes yet")
    tasks = [e["task"] for e in eps]
    succ = np.array([e["success"] for e in eps])
    per_task: dict[str, dict[str, Any]] = {}
    for task in dict.fromkeys(tasks):
        m = np.array([t == task for t in tasks])
        ts = np.array([e["t_success"] for e in eps])[m]
        s = succ[m]
        per_task[task] = {
            "episodes": int(m.sum()), "successes": int(s.sum()), "success_rate": float(s.mean()),
            "success_interval": success_interval(s.astype(bool)).to_dict(), "solved": bool(s.any()),
            "mean_steps_to_success": mean_steps_to_success(np.where(ts >= 0, ts, 0), s),
        }
    psi = np.concatenate([e["psi"] for e in eps])
    labels = np.concatenate([e["labels"] for e in eps])
    step_success = np.concatenate([np.full(e["psi"].shape[0], e["success"]) for e in eps])
    step_episode = [f"{e['task']}#{e['episode']}" for e in eps for _ in range(e["psi"].shape[0])]
    step_task = [e["task"] for e in eps for _ in range(e["psi"].shape[0])]
    out: dict[str, Any] = {
        "agent": cfg.agent, "profile": cfg.profile, "sr_z": cfg.act.sr_z if cfg.agent == "muse" else None,
        "episodes": len(eps), "tasks": len(per_task),
        "tasks_solved": tasks_solved(succ, tasks), "success_rate": success_rate(succ, tasks),
        "success": success_interval(succ.astype(bool)).to_dict(),
        "per_task": per_task, "steps_evaluated": int(psi.shape[0]),
        "positive_label_fraction": float(labels.mean()), "successful_episode_fraction": float(succ.mean()),
    }
    # Self-assessment metrics are meaningful only for an agent that trains the SA head.
    ci: Auroc2Result | None = None
    if cfg.model.muse:
        out["metacognitive_accuracy"] = metacognitive_accuracy(psi.ravel(), labels.ravel())
        out.update(_auroc2_fields(psi.sum(-1), step_success, step_episode, step_task))
        ci = Auroc2Result(**out["auroc2_ci"])
    try:
        st = read_state(run_dir)
        out["wall_seconds"] = st.get("wall_seconds")
        out["updates"] = st.get("updates")
        out["env_steps"] = st.get("env_steps")
        out["update_seconds"] = st.get("update_seconds")
        out["env_seconds"] = st.get("env_seconds")
        out["resumed"] = st.get("resumed")
    except (OSError, ValueError, KeyError):
        pass
    out["_signal"] = (psi.sum(-1), step_success, ci)
    return out


def _auroc2_fields(signal: np.ndarray, outcome: np.ndarray, episodes: list[str], tasks: list[str]) -> dict[str, Any]:
    """``auroc2`` (NaN when undefined), ``auroc2_note`` (why), ``auroc2_ci`` (Auroc2Result dict) and
    ``auroc2_within_task`` (Auroc2ByType dict) of Σψ [R] against the episode outcome [R]."""
    ci = auroc2_clustered(signal, outcome, episodes)
    res: dict[str, Any] = {"auroc2": ci.value if ci.defined else float("nan"), "auroc2_ci": ci.to_dict(),
                           "auroc2_within_task": auroc2_within_types(signal, outcome, episodes, tasks).to_dict()}
    if not ci.defined:
        res["auroc2_note"] = f"undefined: {ci.reason}"
    return res


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * x:.0f}%" if pct else (f"{x:.2f}" if isinstance(x, float) else str(x))


def _auroc_cell(r: Mapping[str, Any]) -> str:
    """``0.71 [0.62, 0.80] (12 successful / 30 failed episodes)`` or ``undefined (n positives = 0 < 5)``."""
    ci = r.get("auroc2_ci")
    if not ci:
        return _fmt(r.get("auroc2"))
    if not ci["defined"]:
        return f"undefined ({ci['reason']})"
    return (f"{ci['value']:.2f} [{ci['low']:.2f}, {ci['high']:.2f}] "
            f"({ci['positives']} successful / {ci['negatives']} failed episodes)")


def _wilson_cell(x: Mapping[str, Any] | None) -> str:
    return f" [{100 * x['low']:.0f}%, {100 * x['high']:.0f}%] ({x['successes']}/{x['n']})" if x else ""


def table_markdown(results: Mapping[str, Mapping[str, Any]],
                   comparisons: list[dict[str, Any]] | None = None) -> str:
    """Table 1 of paper 000 (MUSE self-assessment) in the same form, then the self-regulation
    results of every agent, with intervals and the paired comparisons of the runs."""
    lines = ["Table 1: Self-assessment performance of the MUSE agent on novel tasks in the Meta-World environment.",
             "", "AUROC2: 95 % cluster-bootstrap interval over episodes; undefined below 5 successful or failed "
             "episodes. Within task: only a success and a failure of the same task are compared.", "",
             "| Method | Metric | Value |", "| --- | --- | --- |"]
    for name, r in results.items():
        if "metacognitive_accuracy" in r:
            lines.append(f"| {name} | Metacognitive Accuracy | {_fmt(r['metacognitive_accuracy'], pct=True)} |")
            lines.append(f"| {name} | AUROC2 | {_auroc_cell(r)} |")
            wt = (r.get("auroc2_within_task") or {}).get("pooled")
            if wt:
                lines.append(f"| {name} | AUROC2 within task | {_auroc_cell({'auroc2_ci': wt})} |")
    lines += ["", "Self-regulation on the novel tasks (adaptation episodes); success rate: mean over tasks, in "
              "brackets the Wilson 95 % interval of the episodes' successes:", "",
              "| Method | Tasks solved | Success rate | Episodes |", "| --- | --- | --- | --- |"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['tasks_solved']}/{r['tasks']} | {_fmt(r['success_rate'], pct=True)}"
                     f"{_wilson_cell(r.get('success'))} | {r['episodes']} |")
    tasks = list(next(iter(results.values()))["per_task"])
    lines += ["", "Mean steps to success per task (n/a = unsolved):", "",
              "| Task | " + " | ".join(results) + " |", "|" + " --- |" * (len(results) + 1)]
    for t in tasks:
        row = [_fmt(results[n]["per_task"].get(t, {}).get("mean_steps_to_success")) for n in results]
        lines.append(f"| {t} | " + " | ".join(row) + " |")
    if comparisons:
        lines += comparisons_markdown(comparisons, "Paired comparisons: per-task success rate (percentage points)",
                                      "task", scale=100.0, nd=1)
    return "\n".join(lines) + "\n"


def episodes_csv(run_dir: str | Path, cfg: ProtocolConfig) -> str:
    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow(["agent", "task", "episode", "success", "t_success", "steps", "psi_sum_mean", "psi_sum_first"])
    for e in load_adaptation_steps(run_dir, cfg.novel_tasks, cfg.model.N):
        psum = e["psi"].sum(-1)
        wr.writerow([cfg.agent, e["task"], e["episode"], e["success"], e["t_success"], e["steps"],
                     f"{psum.mean():.4f}", f"{psum[0]:.4f}"])
    return buf.getvalue()


def plot_steps_bars(results: Mapping[str, Mapping[str, Any]], T_max: int, path: str | os.PathLike) -> Path:
    """Grouped bars per task: mean steps to success per agent; unsolved tasks drawn as hatched
    bars at T_max (as in the paper's Figure 5)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    names = list(results)
    tasks = list(next(iter(results.values()))["per_task"])
    fig = Figure(figsize=(max(6.0, 0.8 * len(tasks) + 2), 4.2))
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / len(names)
    x = np.arange(len(tasks))
    for i, n in enumerate(names):
        pt = results[n]["per_task"]
        vals = [pt.get(t, {}).get("mean_steps_to_success", float("nan")) for t in tasks]
        solved = [bool(pt.get(t, {}).get("solved")) for t in tasks]
        h = [v if s and np.isfinite(v) else T_max for v, s in zip(vals, solved)]
        bars = ax.bar(x + (i - (len(names) - 1) / 2) * width, h, width, label=n)
        for b, s in zip(bars, solved):
            if not s:
                b.set_hatch("//")
                b.set_alpha(0.35)
    ax.axhline(T_max, ls="--", c="grey", lw=1)
    ax.set_xticks(x)
    ax.set_xticklabels([t.replace("-v3", "") for t in tasks], rotation=50, ha="right", fontsize=8)
    ax.set_ylabel("mean steps to success (hatched: unsolved)")
    ax.set_title("Novel tasks: steps to success")
    ax.legend(loc="lower right", fontsize=8)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.png")
    fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    os.replace(tmp, out)
    return out


def slug(name: str) -> str:
    """A file-name-safe form of a run name ("MUSE (sr_z=posterior)" -> "MUSE_sr_z_posterior")."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def write_report(runs: Mapping[str, tuple[str | Path, ProtocolConfig]], out_dir: str | Path) -> dict[str, Any]:
    """Evaluate each named run and write results.json, <name>.json, <name>_episodes.csv,
    comparisons.json, table1.md, steps_to_success.png, success_rates.png and type2_roc_<name>.png
    into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    T_max = 500
    for name, (run_dir, cfg) in runs.items():
        r = evaluate_run(run_dir, cfg)
        signal, outcome, ci = r.pop("_signal")
        results[name] = r
        T_max = cfg.max_episode_steps
        atomic_write_json(out / f"{slug(name)}.json", r)
        atomic_write_bytes(out / f"{slug(name)}_episodes.csv", episodes_csv(run_dir, cfg).encode())
        if 0 < outcome.sum() < outcome.size and ci is not None:
            plot_type2_roc(signal, outcome, out / f"type2_roc_{slug(name)}.png", title=f"Type-2 ROC ({name})",
                           result=ci)
    comparisons = pairwise_comparisons({n: {t: v["success_rate"] for t, v in r["per_task"].items()}
                                        for n, r in results.items()}, "per-task success rate")
    atomic_write_json(out / "results.json", results)
    atomic_write_json(out / "comparisons.json", {"comparisons": comparisons})
    atomic_write_bytes(out / "table1.md", table_markdown(results, comparisons).encode())
    plot_steps_bars(results, T_max, out / "steps_to_success.png")
    plot_rates_with_intervals({n: {t.replace("-v3", ""): v["success_interval"] for t, v in r["per_task"].items()}
                               for n, r in results.items()}, out / "success_rates.png",
                              title="Novel tasks: success rate (Wilson 95 % interval)")
    return results


def refresh_report(out_dir: str | Path) -> dict[str, Any]:
    """Add the statistics to a report written before they existed, from its ``results.json`` alone
    (the run folders are not needed): Wilson intervals from the per-task successes/episodes, the
    AUROC2 verdict where the episode counts decide it (undefined below 5 successful or failed
    episodes; a defined AUROC2 needs the run's per-step signal, so it is marked as such), and the
    paired comparisons of the runs. Rewrites results.json (new keys only), comparisons.json,
    table1.md and success_rates.png."""
    out = Path(out_dir)
    path = out / "results.json"
    try:
        results = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"out_dir: cannot read {path} ({exc})") from None
    for name, r in results.items():
        succ = sum(int(t["successes"]) for t in r["per_task"].values())
        n = sum(int(t["episodes"]) for t in r["per_task"].values())
        for t in r["per_task"].values():
            k, m = int(t["successes"]), int(t["episodes"])
            t.setdefault("success_interval", success_interval([True] * k + [False] * (m - k)).to_dict())
        r.setdefault("success", success_interval([True] * succ + [False] * (n - succ)).to_dict())
        if "metacognitive_accuracy" in r and "auroc2_ci" not in r:
            pos, neg = succ, n - succ
            if pos < MIN_EPISODES or neg < MIN_EPISODES:
                why = ", ".join(f"n {w} = {c} < {MIN_EPISODES}" for w, c in (("positives", pos), ("negatives", neg))
                                if c < MIN_EPISODES)
                r["auroc2_ci"] = Auroc2Result(None, None, None, pos, neg, int(r.get("steps_evaluated", 0)), False,
                                              why).to_dict()
                r["auroc2"] = None
                r["auroc2_note"] = f"undefined: {why}"
            else:
                r["auroc2_note"] = "interval not computed: refresh_report has no per-step signal; re-run write_report"
    comparisons = pairwise_comparisons({n: {t: v["success_rate"] for t, v in r["per_task"].items()}
                                        for n, r in results.items()}, "per-task success rate")
    atomic_write_json(path, results)
    atomic_write_json(out / "comparisons.json", {"comparisons": comparisons})
    atomic_write_bytes(out / "table1.md", table_markdown(results, comparisons).encode())
    plot_rates_with_intervals({n: {t.replace("-v3", ""): v["success_interval"] for t, v in r["per_task"].items()}
                               for n, r in results.items()}, out / "success_rates.png",
                              title="Novel tasks: success rate (Wilson 95 % interval)")
    return results


def sa_metrics(psi: Any, labels: Any, success: Any, episodes: list[Any] | None = None,
               tasks: list[Any] | None = None) -> dict[str, Any]:
    """docs/design.md §3 self-assessment metrics of a set of rows (the same functions as Table 1).

    psi [R, N] in [0, 1] (ψ of each row), labels [R, N] (the quantile labels of the row's
    episode), success [R] (its episode's outcome). Returns ``rows``, ``metacognitive_accuracy``
    (every ψ_i >= 0.5 against c_i) and ``auroc2`` (Σ_i ψ_i against success; NaN with an
    ``auroc2_note`` when only one outcome occurs). With ``episodes`` [R] (episode id of each row)
    AUROC2 follows the 5-episode rule and carries ``auroc2_ci`` (cluster bootstrap over episodes);
    with ``tasks`` [R] too, ``auroc2_within_task``."""
    psi, lab, out = np.asarray(psi), np.asarray(labels), np.asarray(success)
    if psi.ndim != 2 or lab.shape != psi.shape or out.shape != psi.shape[:1]:
        raise ValueError(f"psi/labels/success: expected [R, N], [R, N], [R], got "
                         f"{psi.shape}, {lab.shape}, {out.shape}")
    pos = float(lab.mean()) if lab.size else float("nan")
    # always_failure_accuracy: the accuracy of a head that predicts ψ_i < 0.5 everywhere, the
    # base rate the accuracy has to be read against when most labels are 0
    res: dict[str, Any] = {"rows": int(psi.shape[0]),
                           "metacognitive_accuracy": metacognitive_accuracy(psi.ravel(), lab.ravel()),
                           "positive_label_fraction": pos, "always_failure_accuracy": 1.0 - pos}
    if episodes is not None:
        ci = auroc2_clustered(psi.sum(-1), out, episodes)
        res["auroc2"] = ci.value if ci.defined else float("nan")
        res["auroc2_ci"] = ci.to_dict()
        if not ci.defined:
            res["auroc2_note"] = f"undefined: {ci.reason}"
        if tasks is not None:
            res["auroc2_within_task"] = auroc2_within_types(psi.sum(-1), out, episodes, tasks).to_dict()
    elif 0 < out.sum() < out.size:
        from metacog_fast.metrics import auroc2

        res["auroc2"] = auroc2(psi.sum(-1), out)
    else:
        res["auroc2"] = float("nan")
        res["auroc2_note"] = "undefined: every episode had the same outcome"
    return res


def assess_on_scripted(stem: str | Path, tasks: tuple[str, ...], episodes_per_task: int = 4, seed: int = 12345,
                       backend: str = "auto", roc_path: str | Path | None = None, novel: bool = False,
                       roc_title: str | None = None, keep_signal: bool = False) -> dict[str, Any]:
    """Supplementary check of the SA head with the noisy/delayed scripted policy driving the
    episodes (so both outcomes occur), the agent only filtering the observations (its recurrence
    uses the executed action): layouts from ``seed`` (held out), the profile's noise levels and
    delays cycled per episode. ``novel``: the tasks get a zero task embedding (the adaptation
    protocol's novel tasks) instead of their one-hot. Returns pooled accuracy, AUROC2 and counts,
    the same per task (``per_task``), pooled without the random-only episodes
    (``without_random_only``: delay >= 1, the expert never acts) and one record per episode.
    ``keep_signal``: also return ``_signal`` = (Σψ [R], episode success [R]) for a ROC plot."""
    from metacog_fast.envs.driver import play
    from metacog_fast.metaworld.muse_wm import MuseWMAgent
    from metacog_fast.metrics import quantile_labels
    from metacog_fast.metaworld.train.checkpoint import read_config
    from metacog_fast.metaworld.train.config import ActConfig
    from metacog_fast.metaworld.train.rollout import make_metaworld

    if episodes_per_task < 1:
        raise ValueError(f"episodes_per_task: expected >= 1, got {episodes_per_task}")
    cfg, _ = read_config(stem)
    T = cfg.max_episode_steps
    agent = MuseWMAgent.from_checkpoint(stem, act=ActConfig(self_regulation=False, backend=backend), seed=seed)
    rng = np.random.default_rng(seed)
    sc = cfg.scripted
    psis, labels, outcome, records = [], [], [], []
    for ti, task in enumerate(tasks):
        env = make_metaworld(task, seed + ti, T, novel=novel)
        for k in range(episodes_per_task):
            noise = sc.noise_levels[k % len(sc.noise_levels)]
            delay = sc.delay_fractions[(k + ti) % len(sc.delay_fractions)]
            first = env.reset(seed=seed * 7919 + ti * 101 + k)
            agent.reset()
            rows: list[np.ndarray] = []
            start = int(round(delay * T))

            def policy(obs: Any, info: dict[str, Any]) -> np.ndarray:
                agent.act(obs)
                rows.append(agent.psi.copy())
                a = rng.uniform(-1, 1, 4).astype(np.float32) if len(rows) - 1 < start else \
                    np.clip(env.expert() + noise * rng.standard_normal(4), -1, 1).astype(np.float32)
                agent.a = a[None]  # the executed action drives the recurrence
                return a

            ep = play(env, policy, T, start=first)
            t_success = ep.first_success if ep.first_success is not None else -1
            psis.append(np.stack(rows))
            labels.append(quantile_labels(t_success if t_success >= 0 else None, T, cfg.model.N, steps=len(rows)))
            outcome.append(np.full(len(rows), int(t_success >= 0)))
            records.append({"task": task, "noise": float(noise), "delay": float(delay), "success": int(t_success >= 0),
                            "t_success": t_success, "steps": len(rows),
                            "psi_sum_mean": float(psis[-1].sum(-1).mean())})
        env.close()
    psi, lab, out = np.concatenate(psis), np.concatenate(labels), np.concatenate(outcome)
    res: dict[str, Any] = {"episodes": len(psis), "successful_episodes": int(sum(o[0] for o in outcome)),
                           "tasks": list(tasks), "seed": seed, "novel": novel, "T_max": T,
                           "episodes_per_task": episodes_per_task}
    ep_rows = [[i] * len(p) for i, p in enumerate(psis)]  # episode id of each row

    def rows_of(idx: list[int]) -> tuple[list[int], list[str]]:
        return [e for i in idx for e in ep_rows[i]], [records[i]["task"] for i in idx for _ in ep_rows[i]]

    all_eps, all_tasks = rows_of(list(range(len(psis))))
    pooled = sa_metrics(psi, lab, out, all_eps, all_tasks)
    res.update({k: v for k, v in pooled.items() if k != "rows"})
    res["per_task"] = {}
    for task in tasks:
        idx = [i for i, r in enumerate(records) if r["task"] == task]
        m = sa_metrics(np.concatenate([psis[i] for i in idx]), np.concatenate([labels[i] for i in idx]),
                       np.concatenate([outcome[i] for i in idx]), rows_of(idx)[0])
        res["per_task"][task] = {"episodes": len(idx), "successful_episodes": sum(records[i]["success"] for i in idx), **m}
    idx = [i for i, r in enumerate(records) if r["delay"] < 1.0]
    if idx and len(idx) < len(records):
        res["without_random_only"] = {
            "episodes": len(idx), "successful_episodes": sum(records[i]["success"] for i in idx),
            **sa_metrics(np.concatenate([psis[i] for i in idx]), np.concatenate([labels[i] for i in idx]),
                         np.concatenate([outcome[i] for i in idx]), *rows_of(idx))}
    res["episode_records"] = records
    if roc_path is not None and 0 < out.sum() < out.size:
        title = roc_title or f"Type-2 ROC, {'novel' if novel else 'known'} tasks (scripted)"
        plot_type2_roc(psi.sum(-1), out, roc_path, title=title, result=Auroc2Result(**res["auroc2_ci"]))
    if keep_signal:
        res["_signal"] = (psi.sum(-1), out)
    return res


