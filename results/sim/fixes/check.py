"""A small check of the scenario mechanics of issue 53 with the embedded SmolLM2-135M: party and
mystery, full configuration, 5 agents, 20 steps (run 3's length), seeds 0..N-1, one LLM thread.

Each finished run appends one compact record to ``results/sim/fixes/check.json`` (atomic
rewrite), so a stopped check keeps what it finished. The mystery interview asks only the culprit
question ("Who do you suspect is the murderer?"), in every cyclic order; no LLM judge. Usage:

    nice -n 19 python results/sim/fixes/check.py --seeds 3 --out runs/fixes_check
    python results/sim/fixes/check.py --report     # check.md from check.json, no LLM
"""
from __future__ import annotations

import argparse
import json
import os
import time

from metacog_fast.runs.records import write_json_atomic
from metacog_fast.town import load_scenario
from metacog_fast.town.engine import SimConfig, Simulation
from metacog_fast.town.evaluation import culprit_named, interview
from metacog_fast.town.generative import AgentConfig, Features
from metacog_fast.town.runner import open_resources

HERE = os.path.dirname(os.path.abspath(__file__))


def one(scenario: str, seed: int, steps: int, out: str, llm, enc) -> dict:
    sc = load_scenario(scenario, seed=seed, n_agents=5, steps=steps)
    sc.interview_questions = [q for q in sc.interview_questions if q.answer == "agents"]
    sim = Simulation(sc, llm, enc, os.path.join(out, f"{scenario}_seed{seed}"),
                     SimConfig(features=Features(), agent=AgentConfig()))
    t0 = time.perf_counter()
    try:
        sim.run()
        cost = llm.cost.as_dict()
        answers = interview(sim) if scenario == "mystery" else []
        m = sim.metrics()
        sim.save(extra={"interviews": answers})
    finally:
        sim.close()
    rec = {"scenario": scenario, "seed": seed, "steps": m["steps"], "agents": [a.name for a in sim.agents],
           "seconds": round(time.perf_counter() - t0, 1), "llm_calls": cost["calls"],
           "meta_cognize_runs": m["meta_cognize_runs"],
           "actions": [[ag["action"] for ag in f["agents"]] for f in sim.frames[1:]],
           "events": [e for e in sim.log if e["kind"] in ("invite", "tell", "attack", "accuse")]}
    if scenario == "party":
        rec.update({k: m[k] for k in ("attendance", "attendance_rate", "invited")})
        rec["guests"] = len(sim.agents) - 1
    else:
        rec.update({k: m[k] for k in ("kills", "accusations", "detective_accused_culprit")})
        rec["culprit"] = culprit_named(answers, sc.rules["murderer"])
    return rec


def report(doc: dict) -> str:
    """Attendance and culprit named, pooled over the finished runs, with Wilson 95 % intervals
    (agents of one town share a model and a world, so pooled intervals are optimistic)."""
    from metacog_fast.metrics.intervals import wilson_interval

    def rate(k: int, n: int) -> str:
        lo, hi = wilson_interval(k, n) if n else (0.0, 1.0)
        return f"{k}/{n} = {100 * k / max(1, n):.0f} % [{100 * lo:.0f}, {100 * hi:.0f}]"
    party = [r for r in doc["runs"] if r["scenario"] == "party"]
    myst = [r for r in doc["runs"] if r["scenario"] == "mystery"]
    lines = [f"# Check after the issue-53 fixes ({doc['model']}, full configuration, 5 agents)", ""]
    if party:
        lines += ["## Party", "", "| seed | steps | invited | attended | LLM calls | meta_cognize | s |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['seed']} | {r['steps']} | {', '.join(r['invited']) or '-'} | {', '.join(r['attendance']) or '-'}"
                  f" | {r['llm_calls']} | {r['meta_cognize_runs']} | {r['seconds']:.0f} |" for r in party]
        att = sum(len(r["attendance"]) for r in party)
        inv = sum(len(r["invited"]) for r in party)
        n = sum(r["guests"] for r in party)
        lines += ["", f"- attendance: {rate(att, n)} (run 3, same configuration: 0/20 = 0 % [0, 16])",
                  f"- invited: {rate(inv, n)}; invited guests who attended: "
                  f"{sum(len(set(r['attendance']) & set(r['invited'])) for r in party)}/{inv}", ""]
    if myst:
        lines += ["## Mystery", "", "| seed | steps | kills | accusations | culprit named | P(murderer) | chance | s |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['seed']} | {r['steps']} | {len(r['kills'])} | {len(r['accusations'])}"
                  f" | {len(r['culprit']['named_culprit'])}/{r['culprit']['asked']} | {r['culprit'].get('probability', '-')}"
                  f" | {r['culprit'].get('chance', '-')} | {r['seconds']:.0f} |" for r in myst]
        named = sum(len(r["culprit"]["named_culprit"]) for r in myst)
        asked = sum(r["culprit"]["asked"] for r in myst)
        lines += ["", f"- culprit named: {rate(named, asked)} (run 3, same configuration: 6/20 = 30 % [15, 52])",
                  f"- runs with a kill: {sum(bool(r['kills']) for r in myst)}/{len(myst)}; "
                  f"detective accused the murderer: {sum(r['detective_accused_culprit'] for r in myst)}/{len(myst)}", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--scenarios", default="party,mystery")
    ap.add_argument("--out", default="runs/fixes_check")
    ap.add_argument("--report", action="store_true", help="only write check.md from check.json")
    a = ap.parse_args()
    path = os.path.join(HERE, "check.json")
    doc = json.load(open(path)) if os.path.exists(path) else {"model": "SmolLM2-135M (embedded)", "runs": []}
    if a.report:
        text = report(doc)
        tmp = os.path.join(HERE, "check.md.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(HERE, "check.md"))
        print(text)
        return 0
    done = {(r["scenario"], r["seed"]) for r in doc["runs"]}
    llm, enc = open_resources(None, 1)
    for seed in range(a.seeds):
        for scenario in a.scenarios.split(","):
            if (scenario, seed) in done:
                continue
            rec = one(scenario, seed, a.steps, a.out, llm, enc)
            doc["runs"].append(rec)
            write_json_atomic(path, doc)
            print(json.dumps({k: v for k, v in rec.items() if k not in ("actions",)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
