"""A paper's stated ordering of configurations ("MUSE >> Reflexion > ReAct"), tested on paired units.

A claim is a chain of configurations joined by relations; each adjacent pair is one **part**:

* ``A > B``: A is better. Holds when the 95 % paired-bootstrap interval of A - B (over the units
  both have: games, tasks, seeds) lies above 0.
* ``A >> B``: A is much better. Holds when that interval lies above ``much`` (default 0.10, ten
  percentage points of success; the papers' ">>" gaps are 30-50 points, so this is lenient).
* ``A >= B``: A is not worse. Holds unless the interval lies entirely below 0 (it is "not shown
  worse", which is all a bootstrap over a few dozen units can say without a margin).

A part is ``reversed`` when the interval lies entirely below 0 (for ``>=`` that is its only
failure), ``not shown`` otherwise, and ``missing`` when a configuration has no values. The chain
**holds** only when every part holds: an intersection-union test, so testing each part at 5 %
tests the whole claim at 5 % without a multiplicity correction (docs/statistics.md).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Hashable, Mapping, Sequence

from metacog_fast.metrics.intervals import compare_paired

RELATIONS = (">>", ">=", ">")
"""The relations a claim may use, longest first (the order the parser tries them)."""


@dataclass(frozen=True)
class ClaimPart:
    """One adjacent pair of a claim: ``a relation b`` with its paired difference and verdict."""

    a: str
    """The configuration claimed better."""
    relation: str
    """``>``, ``>>`` or ``>=``."""
    b: str
    """The configuration claimed worse."""
    threshold: float
    """What the interval's lower end must exceed (``>``: 0, ``>>``: ``much``); for ``>=`` the upper
    end must reach 0."""
    verdict: str
    """``holds``, ``not shown``, ``reversed`` or ``missing``."""
    diff: float | None
    """Mean of a - b over the common units (None when missing or undefined)."""
    low: float | None
    """Lower end of the 95 % interval of the difference."""
    high: float | None
    """Upper end."""
    p_value: float | None
    """Two-sided bootstrap p of "no difference"."""
    n: int
    """Common units."""


def parse_claim(text: str) -> list[tuple[str, str, str]]:
    """``"muse >> reflexion > react"`` -> [("muse", ">>", "reflexion"), ("reflexion", ">", "react")].
    Names are what is between the relations, stripped; each must be non-empty."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"claim: expected a text such as 'a > b >> c', got {text!r}")
    tokens = re.split(r"\s*(>>|>=|>)\s*", text.strip())
    names, rels = tokens[0::2], tokens[1::2]
    if len(names) < 2 or any(not n for n in names):
        raise ValueError(f"claim: expected names joined by one of {RELATIONS}, e.g. 'muse >> reflexion > react'; "
                         f"got {text!r}")
    return [(names[i], rels[i], names[i + 1]) for i in range(len(rels))]


def _verdict(relation: str, low: float, high: float, much: float) -> tuple[str, float]:
    if relation == ">=":
        return ("reversed" if high < 0 else "holds"), 0.0
    threshold = much if relation == ">>" else 0.0
    if low > threshold:
        return "holds", threshold
    return ("reversed" if high < 0 else "not shown"), threshold


def evaluate_claim(per_unit: Mapping[str, Mapping[Hashable, float]], claim: str, much: float = 0.10,
               resamples: int = 10000, seed: int = 0) -> dict[str, Any]:
    """Test one claim on ``per_unit`` ({configuration: {unit id: value}}, higher is better):
    {"claim", "verdict", "parts": [ClaimPart as dict]}. The claim's verdict is ``holds`` when every
    part holds, ``reversed`` when any part is reversed, ``missing`` when a configuration is absent,
    ``not shown`` otherwise."""
    if not isinstance(much, (int, float)) or not much >= 0:
        raise ValueError(f"much: expected a non-negative number (the margin of '>>'), got {much!r}")
    parts: list[ClaimPart] = []
    for a, rel, b in parse_claim(claim):
        if a not in per_unit or b not in per_unit:
            absent = ", ".join(x for x in (a, b) if x not in per_unit)
            parts.append(ClaimPart(a, rel, b, much if rel == ">>" else 0.0, f"missing ({absent})", None, None,
                                   None, None, 0))
            continue
        r = compare_paired(per_unit[a], per_unit[b], resamples=resamples, seed=seed)
        if not r.defined or r.low is None or r.high is None:
            parts.append(ClaimPart(a, rel, b, much if rel == ">>" else 0.0, f"missing ({r.reason})", None, None,
                                   None, None, r.n))
            continue
        verdict, threshold = _verdict(rel, r.low, r.high, float(much))
        parts.append(ClaimPart(a, rel, b, threshold, verdict, r.diff, r.low, r.high, r.p_value, r.n))
    verdicts = [p.verdict for p in parts]
    if all(v == "holds" for v in verdicts):
        overall = "holds"
    elif any(v == "reversed" for v in verdicts):
        overall = "reversed"
    elif any(v.startswith("missing") for v in verdicts):
        overall = "missing"
    else:
        overall = "not shown"
    return {"claim": claim, "verdict": overall, "much": float(much), "resamples": resamples,
            "parts": [asdict(p) for p in parts]}


def evaluate_claims(per_unit: Mapping[str, Mapping[Hashable, float]], claims: Sequence[str], much: float = 0.10,
                resamples: int = 10000, seed: int = 0) -> list[dict[str, Any]]:
    """:func:`evaluate_claim` for each claim, in order."""
    return [evaluate_claim(per_unit, c, much, resamples, seed) for c in claims]


def claims_markdown(results: Sequence[Mapping[str, Any]], title: str, unit: str, scale: float = 100.0,
                    nd: int = 1) -> list[str]:
    """Markdown lines: each claim with its verdict, then one row per part (difference, interval, p)."""
    from metacog_fast.metrics.intervals import p_cell

    lines = [f"\n## {title}\n",
             f"Each part is a paired bootstrap over {unit}s (95 % interval); `>` holds when the interval is "
             "above 0, `>>` when it is above the margin, `>=` unless it is below 0. A claim holds only when "
             "every part holds (docs/statistics.md).\n",
             "| claim | verdict | part | A − B | 95 % interval | p | " + unit + "s |",
             "|---|---|---|---|---|---|---|"]
    for res in results:
        for i, p in enumerate(res["parts"]):
            head = (f"{res['claim']}", f"**{res['verdict']}**") if i == 0 else ("", "")
            rel = p["relation"] + (f" (margin {scale * p['threshold']:+.{nd}f})" if p["relation"] == ">>" else "")
            part = f"{p['a']} {rel} {p['b']}: {p['verdict']}"
            if p["diff"] is None:
                lines.append(f"| {head[0]} | {head[1]} | {part} | — | — | — | {p['n']} |")
                continue
            lines.append(f"| {head[0]} | {head[1]} | {part} | {scale * p['diff']:+.{nd}f} | "
                         f"[{scale * p['low']:+.{nd}f}, {scale * p['high']:+.{nd}f}] | "
                         f"{p_cell(p['p_value'], res['resamples'])} | {p['n']} |")
    return lines
