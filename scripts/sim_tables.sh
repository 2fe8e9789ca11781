#!/usr/bin/env bash
# Paper 001's town of generative agents, re-measured (docs/sim.md, "Re-measurement"):
#   on each scenario (zombie, party, mystery; each with its own 5 agents), the module sets all,
#   memory_only and no_metacognition, 20 steps, 5 seeds (0-4, paired across module sets), then the
#   interviews and the LLM judge on each run. Report in results/sim/run3: per scenario
#   ablation.md / ablation.json / ablation.png (survival, attendance, culprit named with Wilson intervals; judge
#   scores, mean +- std over seeds, and paired comparisons with bootstrap intervals; LLM calls,
#   tokens, seconds) and costs.md (LLM calls and step latency per scenario and module set).
# The judge is $JUDGE_LLM (--judge-llm): empty (default) = the agents' own embedded
# SmolLM2-135M-Instruct, the strongest model on this machine; or any other URI, e.g. an
# OpenAI-compatible server (http://host:port/v1), which rates the same transcripts while the agents
# keep the embedded model. A folder records its judge and is not resumed with another: give another
# judge its own OUT=runs/sim3-NAME REPORT=results/sim/run3-NAME.
# Every scenario resumes where it stopped (a seed's run is the unit; rerun after a kill). After each
# scenario its config and finished runs (summary, run.json, evaluation.json) are packed into
# results/sim/run3/records/<scenario>.tar.gz (commit them); a rerun on a fresh checkout unpacks them
# and plays only the missing runs.
# Cost: 45 runs of 100 agent-steps; the committed ablation made ~4 LLM calls per agent-step with
# every module and ~1.3-1.8 without metacognition, at ~0.8 s per call on a free core (1.5 s in the
# smoke run on busy cores), plus ~1 min of interviews and judge per run: ~2 h with 2 workers on 2
# free cores, ~2x that while another 2-worker job shares them. SCENARIOS=zombie and
# CONFIGS=all,memory_only limit a call.
#   mkdir -p runs/sim3 && nohup bash scripts/sim_tables.sh > runs/sim3/tables.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
O=${OUT:-runs/sim3}
R=${REPORT:-results/sim/run3}
REC=$R/records
SCENARIOS=${SCENARIOS:-"zombie party mystery"}
CONFIGS=${CONFIGS:-all,memory_only,no_metacognition}
JUDGE_LLM=${JUDGE_LLM:-}
judge=(); [ -z "$JUDGE_LLM" ] || judge=(--judge-llm "$JUDGE_LLM")
mkdir -p $O $REC

restore() {  # SCENARIO: unpack its committed runs where runs/ lacks them
  [ -d $O/$1 ] || [ ! -f $REC/$1.tar.gz ] || tar -xzf $REC/$1.tar.gz -C $O
}
pack() {  # SCENARIO: its config and every finished run (summary = the record, run.json, evaluation.json)
  [ -f $O/$1/config.json ] || return 0
  local d p=("$1/config.json")
  for d in $O/$1/*_run*/; do
    d=${d#$O/}; d=${d%/}
    [ ! -f $O/$d/summary.json ] || p+=("$d/summary.json" "$d/run.json" "$d/evaluation.json")
  done
  tar -czf $REC/$1.tar.gz.tmp -C $O "${p[@]}" && mv $REC/$1.tar.gz.tmp $REC/$1.tar.gz
}

for s in $SCENARIOS; do
  restore $s
  rc=0
  $M sim ablate --scenario $s --steps 20 --runs 5 --configs "$CONFIGS" "${judge[@]}" --llm-threads 1 \
    --workers 2 --out $O/$s >> $O/$s.log 2>&1 || rc=$?
  pack $s
  [ $rc = 0 ] || exit $rc
  mkdir -p $R/$s && cp $O/$s/ablation.json $O/$s/ablation.md $O/$s/ablation.png $R/$s/
done

.venv/bin/python - "$O" "$R" "${JUDGE_LLM:-llama-cpp:// (embedded SmolLM2-135M-Instruct)}" <<'EOF'
# LLM calls and step latency per scenario and module set, from the runs' summaries
import glob, json, statistics as st, sys
o, r, model = sys.argv[1:]
ms = lambda xs: f"{st.fmean(xs):.2f} ± {st.pstdev(xs):.2f}"
md = [f"Agents: the embedded SmolLM2-135M-Instruct; judge: {model}. Mean ± std over runs; latency = simulated wall time / steps.", "",
      "| scenario | config | runs | LLM calls / run | step latency (s) | LLM thinking (s / step) | outside the LLM (ms / step) |",
      "|---|---|---|---|---|---|---|"]
for sc in sorted(glob.glob(f"{o}/*/config.json")):
    runs = {}
    for p in sorted(glob.glob(sc.replace("config.json", "*_run*/summary.json"))):
        runs.setdefault(p.split("/")[-2].rsplit("_run", 1)[0], []).append(json.load(open(p)))
    for c, rs in runs.items():
        t = [x["metrics"].get("timing_ms", {}) for x in rs]
        md.append(f"| {rs[0]['scenario']} | {c} | {len(rs)} | {ms([x['metrics']['llm_cost']['calls'] for x in rs])} | "
                  f"{ms([x['sim_seconds'] / max(1, x['steps']) for x in rs])} | {ms([x.get('llm', 0) / 1000 for x in t])} | "
                  f"{ms([x.get('outside_llm', 0) for x in t])} |")
open(f"{r}/costs.md", "w").write("\n".join(md) + "\n")
EOF
