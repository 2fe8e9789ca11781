#!/usr/bin/env bash
# Paper 003's experience memory (SOPs), re-measured (docs/experience_memory.md, "Re-measurement with
# the fine-tuned actor"): the plan-execute / reflect agents with the fine-tuned ALFWorld actor
# ($ACTOR, finetuned:alfworld by default; it was trained with 0 few-shot examples, and the experience
# prompts hold no trajectories, only the plan prompt's one worked plan),
# the current prompt layout and caps (20 actions per sub-task, 50 per episode, the verifier's
# look/inventory not charged, one retry per failed sub-task in every condition), the MiniLM embedder
# as in the committed runs; on ALFWorld valid_seen:
#   continuous: 3 continual-learning passes over 12 games (the first 2 of each of the 6 task types
#     in the sorted split) against the no-memory baseline on the same games;
#   transfer: the final memory frozen, zero-shot on 12 disjoint games (the next 2 of each type),
#     against the baseline on them;
#   the report per part in results/experience/run3/<part>: metrics.json, tables.md (Wilson
#   intervals, paired comparisons), learning_curve.png (error bars), memory.json; and
#   continuous/sop_events.md (SOPs created, demoted, retired, reactivated per pass, counted from the
#   memory each episode record holds).
# Every part resumes where it stopped (rerun after a kill). After each part its config, episode
# records and memory export are packed into results/experience/run3/records/<part>.tar.gz (commit
# them); a rerun on a fresh checkout unpacks them and plays only what is missing.
# Cost: the memory episodes are one ordered task (one worker; the baselines run on the other):
# 36 + 12 episodes in sequence at ~1-2 min each (50 actions; the committed 30-action runs took
# 14-71 s per task at load 3-7; the smoke run ~4 s per action on busy cores): ~1-2 h on 2 free
# cores, ~2x that while another 2-worker job shares them. PARTS=continuous limits a call.
#   mkdir -p runs/experience3 && nohup bash scripts/experience_tables.sh > runs/experience3/tables.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
O=runs/experience3
REC=results/experience/run3/records
R=results/experience/run3
ACTOR=${ACTOR:-finetuned:alfworld}
GAMES=${GAMES:-0,1,13,14,48,49,75,76,100,101,116,117}
TRANSFER_GAMES=${TRANSFER_GAMES:-2,3,15,16,50,51,77,78,102,103,118,119}
PARTS=${PARTS:-"continuous transfer"}
mkdir -p $O $REC

restore() {  # PART: unpack its committed records where runs/ lacks them
  [ -d $O/$1 ] || [ ! -f $REC/$1.tar.gz ] || tar -xzf $REC/$1.tar.gz -C $O
}
pack() {  # PART: its config, episode records and (when written) memory export
  [ -d $O/$1/episodes ] || return 0
  local p=("$1/config.json" "$1/episodes")
  [ ! -f $O/$1/memory.json ] || p+=("$1/memory.json")
  tar -czf $REC/$1.tar.gz.tmp -C $O "${p[@]}" && mv $REC/$1.tar.gz.tmp $REC/$1.tar.gz
}
common=(--llm "$ACTOR" --threads 1 --embedder minilm --subtask-actions 20 --episode-actions 50
        --retry-without-procedural --baseline --workers 2)

for part in $PARTS; do
  restore $part
  case $part in
    continuous) extra=(--protocol continuous --iterations 3 --games "$GAMES") ;;
    transfer) restore continuous
              [ -f $O/continuous/memory.json ] || { echo "transfer: run continuous first" >&2; exit 2; }
              extra=(--protocol transfer --memory-in $O/continuous/memory.json --games "$TRANSFER_GAMES") ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  rc=0
  $M learn alfworld --out $O/$part "${common[@]}" "${extra[@]}" >> $O/$part.log 2>&1 || rc=$?
  pack $part
  [ $rc = 0 ] || exit $rc
  mkdir -p $R/$part
  cp $O/$part/{metrics.json,tables.md,learning_curve.png,memory.json} $R/$part/
done

[ ! -f $O/continuous/config.json ] || .venv/bin/python - $O/continuous $R/continuous <<'EOF'
# SOP events per memory pass, from the memory after each episode (in play order)
import json, os, sys
run, out = sys.argv[1:]
games = json.load(open(f"{run}/config.json"))["config"]["protocol"]["games"]
prev, rows = {}, []
for it in sorted(int(d) for d in os.listdir(f"{run}/episodes/memory")):
    n = dict.fromkeys(("created", "demoted", "retired", "reactivated"), 0)
    for g in games:
        path = f"{run}/episodes/memory/{it}/{g}.json"
        if not os.path.exists(path):
            continue
        now = {s["env"] + "/" + s["skill"]: s["status"] for s in json.load(open(path))["memory_after"]["procedural"]}
        for k, st in now.items():
            was = prev.get(k)
            if was is None:
                n["created"] += 1
            if st != was and st in ("demoted", "retired"):
                n[st] += 1
            if st == "active" and was in ("demoted", "retired"):
                n["reactivated"] += 1
        prev = now
    rows.append({"iteration": it, **n, "end": {s: sum(v == s for v in prev.values()) for s in ("active", "demoted", "retired")}})
json.dump(rows, open(f"{out}/sop_events.json", "w"), indent=1)
md = ["| pass | SOPs created | demoted | retired | reactivated | at the end: active / demoted / retired |", "|---|---|---|---|---|---|"]
md += [f"| {r['iteration']} | {r['created']} | {r['demoted']} | {r['retired']} | {r['reactivated']} | "
       f"{r['end']['active']} / {r['end']['demoted']} / {r['end']['retired']} |" for r in rows]
open(f"{out}/sop_events.md", "w").write("\n".join(md) + "\n")
EOF
