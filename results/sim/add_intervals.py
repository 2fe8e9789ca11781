"""Adds 95 % Wilson intervals to the count files of the town diagnosis and the post-fix check
(results/sim/diagnosis/run3.json, results/sim/fixes/{movement,check}.json): every count that is a
share of a denominator in the same block (guests, steps, decisions, offers) gets
``intervals[<count>] = {k, n, rate, low, high}``. Steps within one run are not independent, so the
step-level intervals are narrower than the runs justify; the guest- and run-level ones are the ones
to read. Re-run after the scripts that write the counts:

    .venv/bin/python results/sim/add_intervals.py
"""
from __future__ import annotations

import json
from pathlib import Path

from metacog_fast.metrics import wilson_interval

HERE = Path(__file__).resolve().parent
SHARE_OF = {
    "attended": "guests", "guests_ever_at_party_place": "guests", "invited": "guests",
    "guest_steps_at_party_place": "guest_steps", "host_steps_at_party_place": "host_steps",
    "keep_going_chosen": "keep_going_offered", "retargeted_before_arrival": "keep_going_offered",
    "go_to_back_and_forth": "go_to_decisions", "talk_decisions": "guest_steps",
    "named_culprit": "asked", "murderer_steps_someone_in_sight": "murderer_steps",
    "murderer_steps_attack_possible": "murderer_steps", "murderer_attack_chosen": "murderer_steps",
    "detective_steps_someone_in_sight": "detective_steps", "detective_accuse_chosen": "detective_steps",
}


def add(block: dict) -> None:
    """Intervals for the counts of one block (a dict of counts), in place; recurses into sub-blocks."""
    for v in block.values():
        if isinstance(v, dict):
            add(v)
        elif isinstance(v, list):
            for x in v:
                if isinstance(x, dict):
                    add(x)
    out = {}
    for k, d in SHARE_OF.items():
        kk, nn = block.get(k), block.get(d)
        if isinstance(kk, int) and isinstance(nn, int) and 0 <= kk <= nn and nn > 0:
            lo, hi = wilson_interval(kk, nn)
            out[k] = {"k": kk, "n": nn, "of": d, "rate": kk / nn, "low": lo, "high": hi}
    if "attendance" in block and isinstance(block.get("guests"), (int, list)):
        n = block["guests"] if isinstance(block["guests"], int) else len(block["guests"])
        k = block["attendance"] if isinstance(block["attendance"], int) else len(block["attendance"])
        if n and 0 <= k <= n:
            lo, hi = wilson_interval(k, n)
            out["attendance"] = {"k": k, "n": n, "of": "guests", "rate": k / n, "low": lo, "high": hi}
    if out:
        block["intervals"] = out


if __name__ == "__main__":
    for rel in ("diagnosis/run3.json", "fixes/movement.json", "fixes/check.json"):
        p = HERE / rel
        doc = json.loads(p.read_text())
        add(doc)
        p.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        print(p, "intervals added")
