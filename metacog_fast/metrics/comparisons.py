"""Every pairwise comparison of configurations in a report, paired by unit (game, task, seed),
and its markdown table. Each report builds ``{config: {unit id: value}}`` and calls these."""
from __future__ import annotations

from typing import Any, Hashable, Mapping, Sequence

from metacog_fast.metrics.intervals import PairedDifference, compare_paired, p_cell


def pairwise_comparisons(per_unit: Mapping[str, Mapping[Hashable, float]], metric: str,
                         order: Sequence[str] | None = None, resamples: int = 10000, confidence: float = 0.95,
                         seed: int = 0) -> list[dict[str, Any]]:
    """A - B for every pair (A before B in ``order``, default the mapping's order) of
    configurations: ``[{"metric", "a", "b", **PairedDifference.to_dict()}]``."""
    names = list(order) if order is not None else list(per_unit)
    missing = [n for n in names if n not in per_unit]
    if missing:
        raise ValueError(f"order: names {missing} have no per-unit values")
    rows: list[dict[str, Any]] = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            r: PairedDifference = compare_paired(per_unit[a], per_unit[b], resamples, confidence, seed)
            rows.append({"metric": metric, "a": a, "b": b, **r.to_dict()})
    return rows


def comparisons_markdown(rows: Sequence[Mapping[str, Any]], title: str, unit: str, scale: float = 1.0,
                         nd: int = 2) -> list[str]:
    """Markdown lines: one row per comparison with A - B, its interval, p and the paired units;
    values multiplied by ``scale`` (100 for percentage points)."""
    lines = [f"\n## {title}\n",
             f"Paired bootstrap over {unit}s (10,000 resamples, 95 % percentile interval, two-sided p; "
             "docs/statistics.md).\n",
             f"| A | B | A − B | 95 % interval | p | {unit}s |", "|---|---|---|---|---|---|"]
    for r in rows:
        if not r["defined"]:
            lines.append(f"| {r['a']} | {r['b']} | undefined ({r['reason']}) | — | — | {r['n']} |")
            continue
        lines.append(f"| {r['a']} | {r['b']} | {scale * r['diff']:+.{nd}f} | "
                     f"[{scale * r['low']:+.{nd}f}, {scale * r['high']:+.{nd}f}] | "
                     f"{p_cell(r['p_value'], r['resamples'])} | {r['n']} |")
    return lines
