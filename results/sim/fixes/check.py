"""A small check of the scenario mechanics of issue 53 with the embedded SmolLM2-135M: party and
mystery, full configuration, 5 agents, 20 steps (run 3's length), seeds 0..N-1, one LLM thread.

Each finished run appends one compact record to ``results/sim/fixes/check.json`` (atomic
rewrite), so a stopped check keeps what it finished. The mystery interview asks only the culprit
question ("Who do you suspect is the murderer?"), in every cyclic order; no LLM judge. Usage:

    nice -n 19 python results/sim/fixes/check.py --seeds 3 --out runs/fixes_check
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--scenarios", default="party,mystery")
    ap.add_argument("--out", default="runs/fixes_check")
    a = ap.parse_args()
    path = os.path.join(HERE, "check.json")
    doc = json.load(open(path)) if os.path.exists(path) else {"model": "SmolLM2-135M (embedded)", "runs": []}
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
