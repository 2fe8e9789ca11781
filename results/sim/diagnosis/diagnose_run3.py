"""Why run 3's party had no guest and its detective never accused (issue 53, item 1).

Recomputes every count of ``results/sim/diagnosis/run3.md`` from the packed records
``results/sim/run3/records/{party,mystery}.tar.gz`` (frames, action labels, log, metrics) and writes
``results/sim/diagnosis/run3.json``. Run from the repository root:

    python results/sim/diagnosis/diagnose_run3.py
    python results/sim/diagnosis/diagnose_run3.py --runs runs/fixes_check --out results/sim/fixes/movement.json

(``--runs``: the same counts over any folder of run folders named ``<scenario>_...``.)
"""
from __future__ import annotations

import collections
import json
import math
import os
import re
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
RECORDS = os.path.join(ROOT, "results", "sim", "run3", "records")
WORLD = os.path.join(ROOT, "metacog_fast", "town", "data", "worlds", "town.json")


def load_runs(scenario: str) -> dict[str, dict]:
    """{folder name: run.json} of every finished run in the scenario's archive."""
    out = {}
    with tarfile.open(os.path.join(RECORDS, f"{scenario}.tar.gz")) as tar:
        for m in tar.getmembers():
            if m.name.endswith("/run.json"):
                out[m.name.split("/")[-2]] = json.load(tar.extractfile(m))
    if not out:
        raise SystemExit(f"{scenario}.tar.gz: no run.json inside")
    return dict(sorted(out.items()))


def place_fn():
    locs = [(l["name"], l["bounds"]) for l in json.load(open(WORLD))["locations"]]

    def place(x: int, y: int) -> str:
        for n, (x0, y0, x1, y1) in locs:
            if x0 <= x <= x1 and y0 <= y <= y1:
                return n
        return "street"
    return place


def config_of(folder: str) -> str:
    return re.sub(r"_run\d+$", "", folder)


def party(runs: dict[str, dict]) -> dict:
    place = place_fn()
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for folder, d in runs.items():
        c = per[config_of(folder)]
        ru = d["scenario"]["rules"]
        host, loc, s0, dur = ru["host"], ru["location"], ru["start_step"], ru["duration_steps"]
        frames = d["frames"]
        n_steps = len(frames) - 1
        c["runs"] += 1
        c["window_steps_in_run"] += max(0, min(n_steps, s0 + dur) - s0)
        names = [a["name"] for a in d["agents"]]
        c["invited"] += len(d["metrics"]["invited"])
        for i, name in enumerate(names):
            # frame k+1 holds the action chosen at step k and the position after it
            acts = [f["agents"][i]["action"] for f in frames[1:]]
            where = [place(f["agents"][i]["x"], f["agents"][i]["y"]) for f in frames]
            if name == host:
                c["host_steps_at_party_place"] += sum(w == loc for w in where[1:])
                c["host_steps"] += len(where) - 1
                c["host_left_at_step_0"] += int(where[1] != loc)
                continue
            c["guests"] += 1
            c["guest_steps"] += len(acts)
            c["guests_ever_at_party_place"] += int(any(w == loc for w in where))
            c["guest_steps_at_party_place"] += sum(w == loc for w in where[1:])
            c["guest_decisions_go_to_party_place"] += sum(a == f"go to the {loc}" for a in acts)
            c["guest_decisions_keep_going_to_party_place"] += sum(a == f"keep going to the {loc}" for a in acts)
            c["talk_decisions"] += sum(a.startswith("talk to ") for a in acts)
            # "keep going" is offered when the last move named a place not reached yet
            target = None
            moves: list[str] = []
            for k, a in enumerate(acts):
                m = re.match(r"(go to|keep going to) the (.+)$", a)
                if target is not None and where[k] != target:
                    c["keep_going_offered"] += 1
                    c["keep_going_chosen"] += int(a.startswith("keep going"))
                    c["retargeted_before_arrival"] += int(bool(m) and a.startswith("go to"))
                if m:
                    if a.startswith("go to"):
                        moves.append(m.group(2))
                    target = m.group(2)
            c["go_to_decisions"] += len(moves)
            # a "go to" back to the place of the move before the last one: walking back and forth
            c["go_to_back_and_forth"] += sum(moves[j] == moves[j - 2] and moves[j] != moves[j - 1]
                                             for j in range(2, len(moves)))
        for entry in d["log"]:
            c["invite_events"] += entry["kind"] == "invite"
            c["talk_events"] += entry["kind"] == "talk"
        c["attended"] += len(d["metrics"]["attendance"])
    return {k: dict(v) for k, v in per.items()}


def mystery(runs: dict[str, dict]) -> dict:
    per: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for folder, d in runs.items():
        c = per[config_of(folder)]
        ru = d["scenario"]["rules"]
        names = [a["name"] for a in d["agents"]]
        iv, vv = names.index(ru["detective"]), names.index(ru["murderer"])
        perception = 5.0  # mystery.json perception_range
        c["runs"] += 1
        last_kill = -10 ** 9
        kills = {k[0]: k for k in d["metrics"]["kills"]}
        for k, f in enumerate(d["frames"][:-1]):
            A = f["agents"]
            nxt = d["frames"][k + 1]["agents"]
            c["detective_steps"] += A[iv]["alive"]
            near = [j for j, a in enumerate(A) if j != iv and a["alive"]
                    and math.hypot(a["x"] - A[iv]["x"], a["y"] - A[iv]["y"]) <= perception]
            c["detective_steps_someone_in_sight"] += bool(near) and A[iv]["alive"]
            c["detective_accuse_chosen"] += nxt[iv]["action"].startswith("accuse ")
            adj = [j for j, a in enumerate(A) if j != vv and a["alive"]
                   and math.hypot(a["x"] - A[vv]["x"], a["y"] - A[vv]["y"]) <= ru["kill_range"]]
            if A[vv]["alive"] and adj and k - last_kill >= ru["kill_cooldown"]:
                c["murderer_steps_attack_possible"] += 1
                c["murderer_attack_chosen"] += nxt[vv]["action"].startswith("attack ")
            c["murderer_steps"] += A[vv]["alive"]
            d_near = min((math.hypot(a["x"] - A[vv]["x"], a["y"] - A[vv]["y"]) for j, a in enumerate(A)
                          if j != vv and a["alive"]), default=float("inf"))
            c["murderer_steps_someone_in_sight"] += d_near <= perception
            if k in kills:
                last_kill = k
                victim = names.index(kills[k][2])
                c["kills"] += 1
                c["kill_witnesses"] += sum(1 for j, a in enumerate(A) if j not in (vv, victim) and a["alive"]
                                           and math.hypot(a["x"] - A[victim]["x"], a["y"] - A[victim]["y"]) <= perception)
                c["detective_witnessed_kill"] += math.hypot(A[iv]["x"] - A[victim]["x"],
                                                           A[iv]["y"] - A[victim]["y"]) <= perception
        c["accusations"] += len(d["metrics"]["accusations"])
        cul = d["metrics"].get("culprit") or {}
        c["asked"] += cul.get("asked", 0)
        c["named_culprit"] += len(cul.get("named_culprit", []))
        c["probability_sum_x1000"] += round(1000 * cul.get("probability", 0.0) * cul.get("asked", 0))
    out = {k: dict(v) for k, v in per.items()}
    for v in out.values():
        v["mean_probability_murderer"] = round(v.pop("probability_sum_x1000") / 1000 / max(1, v["asked"]), 4)
    return out


def load_folder(folder: str, scenario: str) -> dict[str, dict]:
    out = {}
    for name in sorted(os.listdir(folder)):
        p = os.path.join(folder, name, "run.json")
        if name.startswith(scenario) and os.path.exists(p):
            out[name] = json.load(open(p))
    return out


def main() -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", help="a folder of run folders instead of run 3's records")
    ap.add_argument("--out", help="where to write the counts (default: run3.json beside this script)")
    a = ap.parse_args()
    if a.runs:
        doc = {s: fn(runs) for s, fn in (("party", party), ("mystery", mystery))
               if (runs := load_folder(a.runs, s))}
    else:
        doc = {"party": party(load_runs("party")), "mystery": mystery(load_runs("mystery"))}
    path = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "run3.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(tmp, path)
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
