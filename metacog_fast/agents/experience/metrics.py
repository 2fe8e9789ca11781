"""Per-iteration metrics of a protocol run and the learning-curve plot."""
from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

from metacog_fast.agents.experience.memory import atomic_write_text


def summarise(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Group episodes by (condition, iteration): success rate, mean score, sub-task success,
    retries, re-plans, tokens per task, env actions, memory size at the end of the pass."""
    groups: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for e in episodes:
        groups[(e["condition"], int(e["iteration"]))].append(e)
    rows = []
    for (cond, it), eps in sorted(groups.items()):
        n = len(eps)
        sub_total = sum(e["subtasks_total"] for e in eps)
        rows.append({
            "condition": cond, "iteration": it, "tasks": n,
            "success_rate": sum(bool(e["won"]) for e in eps) / n,
            "mean_score": sum(float(e["score"]) for e in eps) / n,
            "subtask_success": (sum(e["subtasks_flagged"] for e in eps) / sub_total) if sub_total else 0.0,
            "subtasks_accepted": sum(e["subtasks_flagged"] for e in eps),
            "subtasks_attempted": sub_total,
            "loop_hidden_turns_per_task": sum(e.get("loop_hidden_turns", 0) for e in eps) / n,
            "subtask_command_turns_per_task": sum(e.get("grounding", {}).get("subtask_command_turns", 0)
                                                  for e in eps) / n,
            "retries_per_task": sum(e["retries"] for e in eps) / n,
            "replans_per_task": sum(e["replans"] for e in eps) / n,
            "replans_changed_per_task": sum(e["replans_changed"] for e in eps) / n,
            "tokens_per_task": sum(e["tokens"] for e in eps) / n,
            "env_actions_per_task": sum(e["env_actions"] for e in eps) / n,
            "seconds_per_task": sum(e["seconds"] for e in eps) / n,
            "memory_size_end": eps[-1].get("memory_sizes", {}),
        })
    mem = [r["success_rate"] for r in rows if r["condition"] == "memory"]
    return {"rows": rows, "memory_success_by_iteration": mem,
            "monotone_non_decreasing": all(b >= a for a, b in zip(mem, mem[1:])) if mem else None,
            "strictly_improving": all(b > a for a, b in zip(mem, mem[1:])) if len(mem) > 1 else None}


def write_metrics(metrics: dict[str, Any], out: str) -> None:
    atomic_write_text(os.path.join(out, "metrics.json"), json.dumps(metrics, indent=2) + "\n")
    plot_learning_curve(metrics, os.path.join(out, "learning_curve.png"))


def plot_learning_curve(metrics: dict[str, Any], path: str) -> None:
    """Success rate and mean score per iteration (memory) against the no-memory baseline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = metrics["rows"]
    mem = [r for r in rows if r["condition"] == "memory"]
    base = [r for r in rows if r["condition"] == "baseline"]
    frozen = [r for r in rows if r["condition"] == "frozen"]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, key, label in ((axes[0], "success_rate", "success rate"), (axes[1], "subtask_success", "sub-task success")):
        if mem:
            ax.plot([r["iteration"] for r in mem], [r[key] for r in mem], "o-", label="with memory")
        if frozen:
            ax.plot([r["iteration"] for r in frozen], [r[key] for r in frozen], "s", color="tab:green",
                    label="frozen memory (zero-shot)")
        if base:
            ax.axhline(base[0][key], color="gray", ls="--", label="no-memory baseline")
        ax.set_xlabel("iteration")
        ax.set_ylabel(label)
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
