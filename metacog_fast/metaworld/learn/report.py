"""Learning curves of ``metacog train learn`` runs beside the published DreamerV3 curves
(``metacog train learn-report``): one PNG panel per task and a JSON summary.

For every task: each seed's success rate per evaluation with its Wilson interval (over that
evaluation's episodes), the mean over seeds at the steps all seeds reached, with the Wilson
interval of the pooled episodes (all seeds' evaluation episodes at that step), and the published
DreamerV3 seeds and their mean at the published steps. Success is TD-MPC2's definition by
default (``info["success"]`` at the last step of an evaluation episode), the one the published
curves use; ``metric="success"`` plots Meta-World's "at any step" instead (both are in the JSON).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from metacog_fast.metrics import wilson_interval
from metacog_fast.runs.records import write_json_atomic
from metacog_fast.metaworld.learn.records import read_curve
from metacog_fast.metaworld.learn.published import PUBLISHED_DIR, PublishedCurve, load_published

__all__ = ["LearnReportConfig", "action_saturation", "learn_report", "summarise_task"]


@dataclass
class LearnReportConfig:
    """What ``metacog train learn-report`` reads and where it writes."""

    runs: str = "results/metaworld/learning/runs"
    """Folder of <task>/seed<seed>/ run (or copied curve) folders, each with evals/*.json or curve.json."""
    published: str = str(PUBLISHED_DIR)
    """Folder of the published DreamerV3 curves (mw-<task>.csv)."""
    out: str = "results/metaworld/learning"
    """Where learning_curves.png and learning_summary.json go."""
    metric: Literal["final_success", "success"] = "final_success"
    """Success plotted: at the last step (TD-MPC2's, as published) or at any step (Meta-World's)."""
    xmax: int = 100_000
    """Right end of the x axis at least (env steps), so the first published point after 0 shows."""
    run_root: str | None = None
    """Folder of the run folders themselves (<task>/seed<seed>/replay); when given, the summary adds
    per run the share of saturated actions (|a| > 0.99) of its training episodes per evaluation window."""

    def validate(self) -> "LearnReportConfig":
        if not Path(self.runs).is_dir():
            raise ValueError(f"runs: expected a folder of <task>/seed<seed>/ runs, {self.runs!r} does not exist")
        if self.metric not in ("final_success", "success"):
            raise ValueError(f"metric: expected 'final_success' or 'success', got {self.metric!r}")
        if self.xmax < 1:
            raise ValueError(f"xmax: expected a positive number of env steps, got {self.xmax}")
        return self


def _read_seed(folder: Path) -> list[dict[str, Any]]:
    """Evaluation records of one run folder (its evals/ records, else a copied curve.json)."""
    if (folder / "evals").is_dir():
        return read_curve(folder)
    from metacog_fast.runs.records import read_json

    if (folder / "curve.json").is_file():
        recs = read_json(folder / "curve.json")
        if isinstance(recs, list) and recs:
            return recs
    raise ValueError(f"runs: {folder} holds neither evals/*.json nor a non-empty curve.json")


def action_saturation(run_dir: str | Path, window: int) -> list[dict[str, Any]]:
    """Share of action components with |a| > 0.99 in the agent's training episodes of a run, per
    ``window`` env steps: [{"env_steps": end of the window, "saturated": share, "episodes": n}]."""
    from metacog_fast.metaworld.train.replay import ReplayBuffer

    rb = ReplayBuffer(Path(run_dir) / "replay")
    rb.load_dir()
    out: dict[int, list[float]] = {}
    steps = 0
    for ep in rb.episodes:
        steps += ep.steps
        if ep.source != "agent":
            continue
        end = -(-steps // window) * window
        out.setdefault(end, []).append(float((np.abs(ep.prev_action[1:]) > 0.99).mean()))
    return [{"env_steps": k, "saturated": float(np.mean(v)), "episodes": len(v)} for k, v in sorted(out.items())]


def summarise_task(task: str, seeds: dict[int, list[dict[str, Any]]], published: PublishedCurve | None,
                   metric: str = "final_success") -> dict[str, Any]:
    """Per-seed curves, the mean over seeds with pooled Wilson intervals, the published curve."""
    per_seed = {}
    for seed, recs in sorted(seeds.items()):
        per_seed[str(seed)] = [{"env_steps": r["env_steps"], "updates": r["updates"], "n": r["n"],
                                "success": r["success"], "final_success": r["final_success"],
                                "return_mean": r["return_mean"]} for r in recs]
    common = sorted(set.intersection(*[{r["env_steps"] for r in recs} for recs in seeds.values()]))
    mean = []
    for step in common:
        rows = [next(r for r in recs if r["env_steps"] == step) for recs in seeds.values()]
        entry: dict[str, Any] = {"env_steps": step, "seeds": len(rows)}
        for key in ("success", "final_success"):
            k = sum(r[key]["successes"] for r in rows)
            n = sum(r["n"] for r in rows)
            lo, hi = wilson_interval(k, n)
            entry[key] = {"mean_over_seeds": float(np.mean([r[key]["rate"] for r in rows])),
                          "pooled_successes": k, "pooled_n": n, "low": lo, "high": hi}
        entry["return_mean"] = float(np.mean([r["return_mean"] for r in rows]))
        mean.append(entry)
    out: dict[str, Any] = {"task": task, "seeds": per_seed, "mean": mean,
                           "max_env_steps_all_seeds": common[-1] if common else 0}
    if published is not None:
        pub_steps = published.steps()
        out["published"] = {
            "seeds": {str(s): {"steps": v[0].tolist(), "success": v[1].tolist()} for s, v in published.seeds.items()},
            "mean": [{"env_steps": int(s), "success": published.mean_at(int(s))} for s in pub_steps],
        }
        # equal steps: the published steps our runs have an evaluation at
        ours = {m["env_steps"]: m for m in mean}
        out["at_equal_steps"] = [
            {"env_steps": int(s), "ours": ours[int(s)][metric]["mean_over_seeds"],
             "ours_low": ours[int(s)][metric]["low"], "ours_high": ours[int(s)][metric]["high"],
             "published": published.mean_at(int(s))}
            for s in pub_steps if int(s) in ours
        ]
    return out


def _plot(summaries: list[dict[str, Any]], path: Path, metric: str, xmax: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from metacog_fast._atomic import atomic_tmp_path

    fig, axes = plt.subplots(2, len(summaries), figsize=(4.6 * len(summaries), 7.2), squeeze=False)
    for ax, s in zip(axes[1], summaries):  # returns, on our own steps (the published files have none)
        for seed, recs in s["seeds"].items():
            ax.plot([r["env_steps"] for r in recs], [r["return_mean"] for r in recs], color="tab:blue", alpha=0.35,
                    lw=1, marker=".")
        if s["mean"]:
            ax.plot([m["env_steps"] for m in s["mean"]], [m["return_mean"] for m in s["mean"]], color="tab:blue",
                    lw=2.2, label="ours, mean over seeds (thin: seeds)")
        ax.set_xlabel("env steps")
        ax.set_ylabel("mean evaluation return (500 steps)")
        ax.set_title(f"{s['task']}: return", fontsize=10)
        ax.grid(alpha=0.3)
    axes[1][0].legend(fontsize=7, loc="upper left")
    for ax, s in zip(axes[0], summaries):
        right = xmax
        for seed, recs in s["seeds"].items():
            x = [r["env_steps"] for r in recs]
            right = max(right, max(x))
            ax.plot(x, [r[metric]["rate"] for r in recs], color="tab:blue", alpha=0.35, lw=1,
                    marker=".", label=f"ours seed {seed}")
        if s["mean"]:
            x = [m["env_steps"] for m in s["mean"]]
            ax.plot(x, [m[metric]["mean_over_seeds"] for m in s["mean"]], color="tab:blue", lw=2.2,
                    label=f"ours mean ({len(s['seeds'])} seeds)")
            ax.fill_between(x, [m[metric]["low"] for m in s["mean"]], [m[metric]["high"] for m in s["mean"]],
                            color="tab:blue", alpha=0.15, label="ours 95% Wilson (pooled episodes)")
        pub = s.get("published")
        if pub:
            for seed, v in pub["seeds"].items():
                keep = [i for i, st in enumerate(v["steps"]) if st <= right * 1.05]
                ax.plot([v["steps"][i] for i in keep], [v["success"][i] for i in keep], color="tab:orange",
                        alpha=0.35, lw=1, ls="--")
            pm = [m for m in pub["mean"] if m["env_steps"] <= right * 1.05]
            ax.plot([m["env_steps"] for m in pm], [m["success"] for m in pm], color="tab:orange", lw=2.2, ls="--",
                    marker="o", label="DreamerV3 published (TD-MPC2), mean; dashed thin: seeds")
        ax.set_xlim(0, right * 1.05)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(s["task"])
        ax.set_xlabel("env steps")
        ax.set_ylabel("success rate" + (" (last step)" if metric == "final_success" else " (any step)"))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    with atomic_tmp_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=120, format="png")
    plt.close(fig)


def learn_report(cfg: LearnReportConfig) -> dict[str, Any]:
    """Summarise every <task>/seed*/ folder under ``cfg.runs``; writes the PNG and the JSON into
    ``cfg.out`` and returns the summary."""
    cfg.validate()
    root = Path(cfg.runs)
    summaries = []
    for tdir in sorted(p for p in root.iterdir() if p.is_dir()):
        seeds = {}
        for sdir in sorted(tdir.glob("seed*")):
            try:
                seed = int(sdir.name[4:])
            except ValueError:
                continue
            seeds[seed] = _read_seed(sdir)
        if not seeds:
            continue
        try:
            pub = load_published(tdir.name, cfg.published)
        except ValueError:
            pub = None
        summary = summarise_task(tdir.name, seeds, pub, cfg.metric)
        if cfg.run_root is not None:
            window = int(np.diff([r["env_steps"] for r in next(iter(seeds.values()))][:2])[0]) \
                if len(next(iter(seeds.values()))) > 1 else 5000
            summary["action_saturation"] = {
                str(seed): action_saturation(Path(cfg.run_root) / tdir.name / f"seed{seed}", window)
                for seed in seeds if (Path(cfg.run_root) / tdir.name / f"seed{seed}" / "replay").is_dir()}
        summaries.append(summary)
    if not summaries:
        raise ValueError(f"runs: {cfg.runs!r} holds no <task>/seed<seed>/ folders with evaluation records")
    out = Path(cfg.out)
    _plot(summaries, out / "learning_curves.png", cfg.metric, cfg.xmax)
    doc = {"config": asdict(cfg), "tasks": summaries,
           "note": "published: TD-MPC2's DreamerV3 runs (Meta-World v2, 100-step episodes with action repeat 2, "
                   "success at the last step); ours: Meta-World v3, 500-step episodes, no action repeat "
                   "(results/metaworld/published/README.md)"}
    write_json_atomic(out / "learning_summary.json", doc)
    return doc

