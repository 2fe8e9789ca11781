"""Per-iteration metrics of a protocol run, its tables and the learning-curve plot.

Uncertainty (docs/statistics.md): each (condition, iteration) row carries the Wilson interval of
its task successes (``success``) and of its accepted sub-tasks (``subtask_success_interval``; the
sub-tasks of one task are not independent, so read that one as optimistic), and every pair of
rows is compared on task success by a paired bootstrap over the games both played
(``comparisons``). ``tables.md`` shows both; the learning curve draws the Wilson error bars."""
from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from typing import Any

from metacog_fast.experience.memory import atomic_write_text
from metacog_fast.metrics import comparisons_markdown, pairwise_comparisons, success_interval, wilson_interval


def row_label(condition: str, iteration: int) -> str:
    """``memory@2``: the name of a (condition, iteration) row in comparisons."""
    return f"{condition}@{iteration}"


def _unit(e: dict[str, Any]) -> str:
    """The game an episode played, as the pairing unit (its index in the protocol's game list)."""
    return str(e.get("game_arg", e.get("game")))


_NOT_CONTENT = frozenset("a an the in on at to of and then it its some two put look under clean cool heat "
                         "find examine with place go take".split())


def _content_words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower())) - _NOT_CONTENT


def subtasks_on_task(episode: dict[str, Any]) -> tuple[int, int]:
    """(sub-tasks whose description names a content word of the task — an object or receptacle of
    "put a clean mug in coffeemachine" — , sub-tasks): how much of the plan is about the task at
    all. A plan of "go to fridge" for "look at alarmclock under the desklamp" names none."""
    words = _content_words(str(episode.get("task", "")))
    subs = episode.get("subtasks") or []
    return sum(bool(words & _content_words(str(s.get("description", "")))) for s in subs), len(subs)


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
        sub_ok = sum(e["subtasks_flagged"] for e in eps)
        lo, hi = wilson_interval(sub_ok, sub_total) if sub_total else (None, None)
        rows.append({
            "condition": cond, "iteration": it, "tasks": n,
            "success_rate": sum(bool(e["won"]) for e in eps) / n,
            "success": success_interval([bool(e["won"]) for e in eps]).to_dict(),
            "subtask_success_interval": {"low": lo, "high": hi, "successes": sub_ok, "n": sub_total},
            "mean_score": sum(float(e["score"]) for e in eps) / n,
            "subtask_success": (sum(e["subtasks_flagged"] for e in eps) / sub_total) if sub_total else 0.0,
            "subtasks_accepted": sum(e["subtasks_flagged"] for e in eps),
            "subtasks_attempted": sub_total,
            "subtasks_on_task": sum(subtasks_on_task(e)[0] for e in eps),
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
    per_game = {row_label(c, i): {_unit(e): float(bool(e["won"])) for e in eps} for (c, i), eps in sorted(groups.items())}
    return {"rows": rows, "memory_success_by_iteration": mem,
            "comparisons": pairwise_comparisons(per_game, "task success") if len(per_game) > 1 else [],
            "monotone_non_decreasing": all(b >= a for a, b in zip(mem, mem[1:])) if mem else None,
            "strictly_improving": all(b > a for a, b in zip(mem, mem[1:])) if len(mem) > 1 else None}


def write_metrics(metrics: dict[str, Any], out: str) -> None:
    """metrics.json, tables.md and learning_curve.png in ``out``."""
    atomic_write_text(os.path.join(out, "metrics.json"), json.dumps(metrics, indent=2) + "\n")
    atomic_write_text(os.path.join(out, "tables.md"), tables_markdown(metrics))
    plot_learning_curve(metrics, os.path.join(out, "learning_curve.png"))


def tables_markdown(metrics: dict[str, Any]) -> str:
    """Per (condition, iteration): task success with its Wilson interval, sub-task success, score,
    costs; then the paired comparisons of the rows on task success."""
    L = ["## Task success per condition and iteration", "",
         "Wilson 95 % intervals (successes/n). Sub-task intervals treat sub-tasks as independent, which they "
         "are not within a task: read them as optimistic.", "",
         "Sub-tasks on the task: those whose description names an object or receptacle of the task (the "
         "plan's relevance; `subtasks_on_task`).", "",
         "| condition | iteration | tasks | success | sub-task success | sub-tasks on the task | mean score | "
         "retries/task | env actions/task |",
         "|---|---|---|---|---|---|---|---|---|"]
    for r in metrics["rows"]:
        s = r.get("success")
        succ = (f"{100 * r['success_rate']:.0f}% [{100 * s['low']:.0f}%, {100 * s['high']:.0f}%] "
                f"({s['successes']}/{s['n']})") if s else f"{100 * r['success_rate']:.0f}%"
        si = r.get("subtask_success_interval") or {}
        sub = f"{100 * r['subtask_success']:.0f}%"
        if si.get("low") is not None:
            sub += f" [{100 * si['low']:.0f}%, {100 * si['high']:.0f}%] ({si['successes']}/{si['n']})"
        on = f"{r['subtasks_on_task']}/{r['subtasks_attempted']}" if "subtasks_on_task" in r else "—"
        L.append(f"| {r['condition']} | {r['iteration']} | {r['tasks']} | {succ} | {sub} | {on} | {r['mean_score']:.2f} | "
                 f"{r['retries_per_task']:.2f} | {r['env_actions_per_task']:.1f} |")
    if metrics.get("comparisons"):
        L += comparisons_markdown(metrics["comparisons"], "Paired comparisons: task success (percentage points)",
                                  "game", scale=100.0, nd=1)
    return "\n".join(L) + "\n"


def plot_learning_curve(metrics: dict[str, Any], path: str) -> None:
    """Success rate and sub-task success per iteration (memory, frozen) against the no-memory
    baseline, with Wilson 95 % error bars (the baseline's as a grey band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = metrics["rows"]
    mem = [r for r in rows if r["condition"] == "memory"]
    base = [r for r in rows if r["condition"] == "baseline"]
    frozen = [r for r in rows if r["condition"] == "frozen"]
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    def err(rs: list[dict[str, Any]], key: str) -> Any:
        """[2, n] Wilson error bars of the rows (None when a row has no interval)."""
        ivs = [r.get("success") if key == "success_rate" else r.get("subtask_success_interval") for r in rs]
        if any(not iv or iv.get("low") is None for iv in ivs):
            return None
        return [[r[key] - iv["low"] for r, iv in zip(rs, ivs)], [iv["high"] - r[key] for r, iv in zip(rs, ivs)]]

    for ax, key, label in ((axes[0], "success_rate", "success rate"), (axes[1], "subtask_success", "sub-task success")):
        if mem:
            ax.errorbar([r["iteration"] for r in mem], [r[key] for r in mem], yerr=err(mem, key), fmt="o-",
                        capsize=3, label="with memory")
        if frozen:
            ax.errorbar([r["iteration"] for r in frozen], [r[key] for r in frozen], yerr=err(frozen, key), fmt="s",
                        color="tab:green", capsize=3, label="frozen memory (zero-shot)")
        if base:
            ax.axhline(base[0][key], color="gray", ls="--", label="no-memory baseline")
            e = err(base[:1], key)
            if e is not None:
                ax.axhspan(base[0][key] - e[0][0], base[0][key] + e[1][0], color="gray", alpha=0.15)
        ax.set_xlabel("iteration")
        ax.set_ylabel(label)
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    os.replace(tmp, path)
