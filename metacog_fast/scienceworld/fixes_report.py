"""Before/after table of the fixes without training (issue 50): episodes of two run folders of one
configuration, paired by (task, variation).

Per setting: mean final score with a bootstrap interval over episodes, the share of episodes that
leave the start room and the share that end in a strictly periodic loop (Wilson intervals), and
the paired bootstrap of the score difference.
"""
from __future__ import annotations

import glob
import os
from typing import Any

from metacog_fast._atomic import atomic_open
from metacog_fast.metrics import mean_interval
from metacog_fast.metrics.intervals import compare_paired, rate_with_interval
from metacog_fast.scienceworld.guards import periodic_loop
from metacog_fast.scienceworld.store import read_json, write_json

LOOP_TAIL = 12
"""Trailing actions looked at for an ending loop (period <= 6, at least two copies, >= 8 actions)."""


def ends_in_loop(actions: list[str]) -> bool:
    """The episode's last actions are a strictly periodic loop (period <= 6, >= 2 copies, >= 8 actions)."""
    return periodic_loop(actions[-LOOP_TAIL:], max_period=6, repeats=2, min_length=8) > 0


def left_start_room(ep: dict[str, Any]) -> bool:
    """The episode entered a room other than the one it started in (``EpisodeResult.rooms``)."""
    return len([r for r in ep.get("rooms", []) if r]) > 1


def episodes(run: str, config: str = "baseline") -> dict[str, dict[str, Any]]:
    """{"task__variation": episode record} of ``run/episodes/<config>``."""
    files = sorted(glob.glob(os.path.join(run, "episodes", config, "*.json")))
    if not files:
        raise ValueError(f"run: no {config!r} episodes under {run}/episodes/{config}")
    return {os.path.basename(f)[: -len(".json")]: read_json(f) for f in files}


def summarise(eps: dict[str, dict[str, Any]]) -> dict[str, Any]:
    vals = list(eps.values())
    return {
        "episodes": len(vals),
        "score": mean_interval([e["score"] for e in vals]),
        "success": rate_with_interval([bool(e["won"]) for e in vals]),
        "left_start_room": rate_with_interval([left_start_room(e) for e in vals]),
        "ends_in_loop": rate_with_interval([ends_in_loop(e["actions"]) for e in vals]),
        "focus_actions_per_episode": sum(sum(a.startswith("focus on") for a in e["actions"]) for e in vals) / len(vals),
        "minus_100_endings": sum(e["raw_score"] < 0 for e in vals),
    }


def compare(before: str, after: str, out: str, config: str = "baseline",
            labels: tuple[str, str] = ("before", "after")) -> dict[str, Any]:
    """Write ``out``.json and ``out``.md comparing run folders ``before`` and ``after`` (named
    ``labels`` in the table); returns the dict."""
    a, b = episodes(before, config), episodes(after, config)
    common = sorted(set(a) & set(b))
    if len(common) < 2:
        raise ValueError(f"before/after: {len(common)} common episodes; expected >= 2 paired (task, variation)")
    a = {k: a[k] for k in common}
    b = {k: b[k] for k in common}
    diff = compare_paired({k: b[k]["score"] for k in common}, {k: a[k]["score"] for k in common})
    res = {"before": {"run": before, **summarise(a)}, "after": {"run": after, **summarise(b)},
           "after_minus_before": {"diff": diff.diff, "low": diff.low, "high": diff.high, "p_value": diff.p_value,
                                  "n": diff.n},
           "labels": list(labels), "episodes": common}
    write_json(out + ".json", res)
    with atomic_open(out + ".md", "w") as f:
        f.write(markdown(res))
    return res


def _r(x: dict[str, Any]) -> str:
    return f"{x['successes']}/{x['n']} [{100 * x['low']:.0f}, {100 * x['high']:.0f}] %"


def markdown(res: dict[str, Any]) -> str:
    rows = ["| setting | episodes | final score (95 % bootstrap) | success | left the start room | ends in a loop | "
            "focus actions / episode | -100 endings |", "|---|---|---|---|---|---|---|---|"]
    labels = res.get("labels", ["before", "after"])
    for name, label in zip(("before", "after"), labels):
        s = res[name]
        sc = s["score"]
        rows.append(f"| {label} | {s['episodes']} | {sc['mean']:.2f} [{sc['low']:.2f}, {sc['high']:.2f}] | "
                    f"{_r(s['success'])} | {_r(s['left_start_room'])} | {_r(s['ends_in_loop'])} | "
                    f"{s['focus_actions_per_episode']:.2f} | {s['minus_100_endings']} |")
    d = res["after_minus_before"]
    tail = (f"\n{labels[1]} - {labels[0]}, final score, paired bootstrap over the {d['n']} episodes: "
            f"{d['diff']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}], p = {d['p_value']:.2f}.\n"
            if d["diff"] is not None else "\nToo few paired episodes for a difference.\n")
    return "\n".join(rows) + "\n" + tail
