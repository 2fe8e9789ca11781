"""What metacognition through control did in an ablation folder (docs/sim.md, "The ablation with control").

For each configuration, summed over its runs: progress ratings (made, skipped), meta_cognize runs and
rethinks, the controls chosen (keep / move / seek), the seeking intentions' outcomes (found, lost,
invitations made and facts passed on when found), all invitations, attendance, and the LLM calls and
seconds. Reads ``<folder>/<config>_run<i>/run.json``; writes ``control_counts.json`` and
``control_counts.md`` beside this script (or ``--out``).

    python results/sim/control/control_counts.py runs/sim_control/party
"""
from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path


def summarize(folder: Path) -> dict:
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
        c["attended"] += len(m.get("attendance", []))
        c["llm_calls"] += m.get("llm_cost", {}).get("calls", 0)
        c["llm_seconds"] += round(m.get("llm_cost", {}).get("seconds", 0.0))
    if not per:
        raise SystemExit(f"folder: {folder} holds no <config>_run<i>/run.json")
    return {k: dict(v) for k, v in per.items()}


def markdown(doc: dict) -> str:
    keys = ["runs", "ratings", "ratings_skipped", "meta_cognize", "rethinks", "control_keep", "control_move",
            "control_seek", "seek_found", "seek_lost", "seek_invited", "seek_facts_shared", "invitations",
            "attended", "guests", "llm_calls", "llm_seconds"]
    rows = ["| config | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for name, c in doc.items():
        rows.append(f"| {name} | " + " | ".join(str(c.get(k, 0)) for k in keys) + " |")
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
