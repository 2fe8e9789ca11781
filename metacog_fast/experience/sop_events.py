"""SOP events per memory pass of a continual-learning run (``metacog learn alfworld --protocol
continuous``), counted from the memory each episode record holds: SOPs created, demoted, retired and
reactivated per pass, and how many are active / demoted / retired at its end.

Reads ``RUN/config.json`` and ``RUN/episodes/memory/<pass>/<game>.json`` (in play order: the games of
the run's protocol); writes ``OUT/sop_events.json`` (a list of rows) and ``OUT/sop_events.md``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from metacog_fast._atomic import atomic_open
from metacog_fast.runs.records import write_json_atomic

STATES = ("active", "demoted", "retired")


def sop_event_rows(run: str | os.PathLike) -> list[dict[str, Any]]:
    """One row per memory pass: {iteration, created, demoted, retired, reactivated, end: {state: n}}."""
    run = Path(run)
    games = json.loads((run / "config.json").read_text())["config"]["protocol"]["games"]
    prev: dict[str, str] = {}
    rows = []
    for it in sorted(int(d) for d in os.listdir(run / "episodes" / "memory")):
        n = dict.fromkeys(("created", "demoted", "retired", "reactivated"), 0)
        for g in games:
            path = run / "episodes" / "memory" / str(it) / f"{g}.json"
            if not path.exists():
                continue
            now = {s["env"] + "/" + s["skill"]: s["status"]
                   for s in json.loads(path.read_text())["memory_after"]["procedural"]}
            for k, st in now.items():
                was = prev.get(k)
                if was is None:
                    n["created"] += 1
                if st != was and st in ("demoted", "retired"):
                    n[st] += 1
                if st == "active" and was in ("demoted", "retired"):
                    n["reactivated"] += 1
            prev = now
        rows.append({"iteration": it, **n, "end": {s: sum(v == s for v in prev.values()) for s in STATES}})
    return rows


def write_sop_events(run: str, out: str) -> str:
    """Write ``out/sop_events.json`` and ``out/sop_events.md`` from ``run`` (atomically); a run without
    a config.json is nothing to count. Returns what it did, in words."""
    if not (Path(run) / "config.json").is_file():
        return f"{run}: no config.json, no SOP events"
    rows = sop_event_rows(run)
    write_json_atomic(Path(out) / "sop_events.json", rows)
    md = ["| pass | SOPs created | demoted | retired | reactivated | at the end: active / demoted / retired |",
          "|---|---|---|---|---|---|"]
    md += [f"| {r['iteration']} | {r['created']} | {r['demoted']} | {r['retired']} | {r['reactivated']} | "
           f"{r['end']['active']} / {r['end']['demoted']} / {r['end']['retired']} |" for r in rows]
    with atomic_open(Path(out) / "sop_events.md") as f:
        f.write("\n".join(md) + "\n")
    return f"{len(rows)} pass(es) -> {out}/sop_events.md"
