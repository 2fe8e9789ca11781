"""What metacognition through control did in an ablation folder (docs/sim.md, "The ablation with control").

For each configuration, summed over its runs: progress ratings (made, skipped), meta_cognize runs and
rethinks, the controls chosen (keep / move / seek), the seeking intentions' outcomes (found, lost,
interrupted by a zombie in sight, invitations made and facts passed on when found), all invitations,
attendance (any guest, and informed: knowing of the party), the mystery's kills (and how many had
someone within perception range of the body in that step's frame), accusations and culprit answers,
the zombie's deaths (and how many came while looking for someone), and the LLM calls and seconds; informed attendance and the share of
ended intentions that found their person with Wilson 95 % intervals, pooled over runs. Reads
``<folder>/<config>_run<i>/run.json``; writes ``control_counts_<folder name>.json`` and ``.md`` beside
this script (or in ``--out``).

    python results/sim/control/control_counts.py runs/sim_control/party
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path


def _witnesses(doc: dict, step: int, killer: str, victim: str) -> int:
    """Living agents other than the killer within perception range of the victim's body in the frame
    of the kill's step (positions after that step's moves: an approximation of who saw it)."""
    from metacog_fast.town import load_scenario

    r = load_scenario(doc["scenario"]["name"]).perception_range
    frame = next((f for f in doc["frames"] if f["step"] == step), None)
    if frame is None:
        return 0
    body = next(((x, y) for name, x, y in frame["bodies"] if name == victim), None)
    if body is None:
        return 0
    return sum(1 for a in frame["agents"] if a["alive"] and a["name"] not in (killer, victim)
               and (a["x"] - body[0]) ** 2 + (a["y"] - body[1]) ** 2 <= r * r)


def summarize(folder: Path) -> dict:
    from metacog_fast.town.evaluation import informed_attendance

    per: dict[str, Counter] = defaultdict(Counter)
    for run in sorted(folder.glob("*_run*/run.json")):
        config = re.sub(r"_run\d+$", "", run.parent.name)
        doc = json.loads(run.read_text())
        m = doc["metrics"]
        c = per[config]
        c["runs"] += 1
        for k, v in m.get("metacognition", {}).items():
            c[k] += int(v)
        c["rethinks"] += sum(e["kind"] == "rethink" for a in doc["agents"] for e in a["timeline"])
        c["invitations"] += sum(e["kind"] == "invite" for e in doc["log"])
        c["guests"] += max(0, m["agents"] - 1) if "attendance" in m else 0
        if "attendance" in m:
            c["attended"] += len(m["attendance"])
            c["attended_informed"] += len(informed_attendance(doc))
        if "kills" in m:  # the mystery: kills, who could have seen them, accusations, the culprit question
            c["kills"] += len(m["kills"])
            c["kills_seen"] += sum(_witnesses(doc, step, killer, victim) > 0 for step, killer, victim in m["kills"])
            c["accusations"] += len(m["accusations"])
            cu = m.get("culprit", {})
            c["culprit_asked"] += cu.get("asked", 0)
            c["culprit_named"] += len(cu.get("named_culprit", []))
        if "survival_rate" in m:  # the zombie: deaths, and how many came while looking for someone
            last: dict[str, dict] = {}
            for frame in doc["frames"]:
                for ag in frame["agents"]:
                    if not ag["alive"] and last.get(ag["name"], {}).get("alive"):
                        c["deaths"] += 1
                        c["deaths_seeking"] += last[ag["name"]]["action"].startswith("look for")
                    last[ag["name"]] = ag
        c["llm_calls"] += m.get("llm_cost", {}).get("calls", 0)
        c["llm_seconds"] += round(m.get("llm_cost", {}).get("seconds", 0.0))
    if not per:
        raise SystemExit(f"folder: {folder} holds no <config>_run<i>/run.json")
    from metacog_fast.metrics import wilson_interval

    out = {}
    for k, c in per.items():
        doc: dict = dict(c)
        for name, ok, n in (("informed_attendance", c["attended_informed"], c["guests"]),
                            ("found_rate", c["seek_found"], c["seek_found"] + c["seek_lost"] + c["seek_interrupted"]),
                            ("culprit_rate", c["culprit_named"], c["culprit_asked"])):
            if n:  # Wilson 95 %, pooled over runs (agents of one run share a town: optimistic)
                lo, hi = wilson_interval(ok, n)
                doc[name] = {"rate": ok / n, "low": lo, "high": hi, "successes": ok, "n": n}
        out[k] = doc
    return out


def markdown(doc: dict) -> str:
    keys = ["runs", "ratings", "ratings_skipped", "meta_cognize", "rethinks", "control_keep", "control_move",
            "control_seek", "seek_found", "seek_lost", "seek_interrupted", "seek_invited", "seek_facts_shared", "invitations",
            "attended", "attended_informed", "guests", "kills", "kills_seen", "accusations", "culprit_named",
            "culprit_asked", "deaths", "deaths_seeking", "llm_calls", "llm_seconds"]
    rows = ["| config | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for name, c in doc.items():
        rows.append(f"| {name} | " + " | ".join(str(c.get(k, 0)) for k in keys) + " |")
    rows += ["", "| config | informed attendance (Wilson 95 %) | intentions found / ended (Wilson 95 %) | "
             "culprit named / asked (Wilson 95 %) |", "|---|---|---|---|"]
    for name, c in doc.items():
        cells = [f"{x['successes']}/{x['n']} = {100 * x['rate']:.0f} % [{100 * x['low']:.0f}, {100 * x['high']:.0f}]"
                 if (x := c.get(k)) else "-" for k in ("informed_attendance", "found_rate", "culprit_rate")]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path, help="an ablation folder (metacog sim ablate --out)")
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    a = p.parse_args()
    doc = summarize(a.folder)
    stem = a.out / f"control_counts_{a.folder.name}"
    stem.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n")
    stem.with_suffix(".md").write_text(markdown(doc))
    print(markdown(doc))


if __name__ == "__main__":
    main()
