"""Compare the ratios two runs of one benchmark suite recorded against their anchors.

    python bench/compare_ratios.py OLD.json NEW.json [--label NAME] >> report.md

Every benchmark measures its anchor in the same run and records ratios in ``extra_info`` (keys
holding ``ratio`` or ``speedup``, nested dicts included, e.g. ``dreamer_bf16.ratio_vs_anchor``).
Ratios are what can be compared across runs, machines and loads; absolute times cannot. This
pairs the benchmarks of both files by name and prints one markdown row per ratio present in both:
old, new, and new/old. It prints, it does not judge: whether a change is noise is read against
the spread the suite itself records (``ratio_per_round``, repeated rounds), not a threshold here.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, Iterator


def ratio_figures(info: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, float]]:
    """``(dotted key, value)`` of every finite number under a key naming a measured ratio or speedup
    (``target_*`` keys are goals, not measurements)."""
    for key, value in info.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from ratio_figures(value, f"{name}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            words = key.split("_")
            if ("ratio" in words or "speedup" in words) and words[0] != "target":
                yield name, float(value)


def load(path: Path) -> dict[str, dict[str, float]]:
    """``{benchmark name: {ratio key: value}}`` of a pytest-benchmark JSON file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"compare_ratios: {path}: not a readable pytest-benchmark JSON file ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise SystemExit(f"compare_ratios: {path}: expected a pytest-benchmark JSON file with a 'benchmarks' list")
    return {b["name"]: dict(ratio_figures(b.get("extra_info", {}))) for b in data["benchmarks"]}


def rows(old: dict[str, dict[str, float]], new: dict[str, dict[str, float]]) -> list[tuple[str, str, float, float]]:
    """``(benchmark, key, old, new)`` for every ratio both runs recorded, in the new file's order."""
    out = []
    for name, figures in new.items():
        for key, value in figures.items():
            if key in old.get(name, {}):
                out.append((name, key, old[name][key], value))
    return out


def markdown(label: str, table: list[tuple[str, str, float, float]], missing: list[str]) -> str:
    lines = [f"### {label}", "", "| benchmark | ratio | before | after | after / before |", "|---|---|---:|---:|---:|"]
    for name, key, before, after in table:
        change = f"{after / before:.3f}" if before else "-"
        lines.append(f"| {name} | {key} | {before:.4g} | {after:.4g} | {change} |")
    if missing:
        lines += ["", "Benchmarks in only one of the runs: " + ", ".join(missing)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("old", type=Path, help="the committed run (pytest-benchmark JSON)")
    p.add_argument("new", type=Path, help="the re-run (pytest-benchmark JSON)")
    p.add_argument("--label", default=None, help="heading of the table (default: the new file's name)")
    a = p.parse_args(argv)
    old, new = load(a.old), load(a.new)
    missing = sorted(set(old) ^ set(new))
    sys.stdout.write(markdown(a.label or a.new.name, rows(old, new), missing))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
