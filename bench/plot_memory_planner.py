"""Plot of bench/results/memory_planner_*.json: recall@10 against exact=True and p50 latency
relative to the exact scan, per weight vector, for each data kind and store size.

    python bench/plot_memory_planner.py   # -> bench/results/memory_planner.png
"""
from __future__ import annotations

import glob
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def load() -> list[dict]:
    out = []
    for path in sorted(glob.glob(os.path.join(HERE, "results", "memory_planner_*.json"))):
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                out.append(b["extra_info"])
    return sorted(out, key=lambda e: (e["data"], e["n"]))


def main() -> None:
    runs = load()
    if not runs:
        raise SystemExit("no bench/results/memory_planner_*.json")
    fig, (ax_r, ax_t) = plt.subplots(2, 1, figsize=(13, 8), sharex=True)
    labels = None
    for e in runs:
        rows = e["rows"]
        labels = [",".join(f"{x:g}" for x in r["weights"]) for r in rows]
        x = range(len(rows))
        name = f"{e['data']} {e['n']:,}"
        style = "-" if e["data"] == "clustered" else "--"
        ax_r.plot(x, [r["recall_at_10"] for r in rows], style, marker=".", label=name)
        ax_t.plot(x, [r["ratio_vs_exact"] for r in rows], style, marker=".", label=name)
    ax_r.axhline(0.95, color="red", lw=0.8)
    ax_r.set_ylabel("recall@10 vs exact=True")
    ax_r.set_ylim(0.9, 1.005)
    ax_r.legend(fontsize=8, ncol=3)
    ax_t.axhline(1.0, color="red", lw=0.8)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("p50 planner / p50 exact scan")
    ax_t.set_xticks(range(len(labels)))
    ax_t.set_xticklabels(labels, rotation=90, fontsize=6)
    ax_t.set_xlabel("weights (w_rec, w_rel, w_imp)")
    fig.suptitle("Memory retrieval planner: every weighting in {0, 0.5, 1, 2}^3 (one query per call, k=10)")
    fig.tight_layout()
    out = os.path.join(HERE, "results", "memory_planner.png")
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
