#!/usr/bin/env bash
# Paper 000's ALFWorld comparison with the fine-tuned actor (docs/alfworld_agents.md, "Run 3"):
#   pre-deployment on valid_seen: Reflexion episodes of the actor (60 games x 2 episodes), M_sa trained
#   on their chunks labelled by the real outcomes (no expert chunks);
#   then on 60 valid_train games (10 per task type), Algorithm 4 with 2 adaptation and 2 test episodes
#   per game, 50-step episodes, every agent with the same actor ($ACTOR, prompted as it was trained:
#   no few-shot examples, its raw text sent as the command):
#     react; reflexion and fcrf reflecting with the base SmolLM2; reflexion+sl (the paper's control:
#     the SFT actor and the DPO reflector, no self-assessment); muse, muse-lowest and muse-random with
#     the DPO reflector and the pre-deployment M_sa (muse-random decoding only its pick:
#     --decode-only-pick, the same actions for a fraction of the decoding);
#   beyond the paper, reflexion-onfail and reflexion+sl-onfail: the same two agents reflecting only
#   after a failed episode (--reflect-on failure, Reflexion's original trials), since reflections
#   written after wins cost the fine-tuned actor games it had won, and muse-onfail, MUSE doing the
#   same (not in the default AGENTS);
#   the report (Wilson intervals, AUROC2 with its interval and distinct positive episodes, costs).
# Every run resumes where it stopped (rerun after a kill). Every 15 minutes and after each run its
# config and episode records are packed into results/alfworld/run3/records/<run>.tar.gz (commit them); a rerun on a fresh
# checkout unpacks them and plays only what is missing. Runs take hours on this 2-core machine (MUSE:
# 5 rollouts per step); AGENTS="react reflexion" limits a call to some of them.
#   nohup bash scripts/alfworld_tables.sh > runs/alfworld3/tables.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
O=runs/alfworld3
REC=results/alfworld/run3/records
ACTOR=${ACTOR:-finetuned:alfworld}
DPO=${DPO_REFLECTOR:-finetuned:reflector-dpo2}
BASE=llama-cpp://
AGENTS=${AGENTS:-"react reflexion reflexion+sl fcrf muse muse-lowest muse-random"}
mkdir -p $O $REC

restore() {  # NAME: unpack a run's committed records where runs/ lacks them
  [ -d $O/$1 ] || [ ! -f $REC/$1.tar.gz ] || tar -xzf $REC/$1.tar.gz -C $O
}
pack() {  # NAME [more paths inside it]: its config and episode records (adapted scorers are refitted)
  local n=$1; shift
  (cd $O && tar -czf ../../$REC/$n.tar.gz.tmp $n/config.json $n/episodes "$@") && mv $REC/$n.tar.gz.tmp $REC/$n.tar.gz
}
common=(--llm "$ACTOR" --examples 0 --map-actions none --n-threads 1)

restore pretrain
if [ ! -f $O/pretrain/scorer/config.json ]; then
  $M pretrain alfworld --out $O/pretrain --split valid_seen --tasks 60 --episodes 2 --no-expert-positives \
    "${common[@]}" --reflector "$DPO" --workers 2 >> $O/pretrain.log 2>&1 || { \
    (cd $O && tar -czf ../../$REC/pretrain.tar.gz.tmp pretrain/collect/config.json pretrain/collect/episodes) && \
    mv $REC/pretrain.tar.gz.tmp $REC/pretrain.tar.gz; exit 1; }
fi
(cd $O && tar -czf ../../$REC/pretrain.tar.gz.tmp pretrain/collect/config.json pretrain/collect/episodes pretrain/scorer \
  pretrain/pretrain.json) && mv $REC/pretrain.tar.gz.tmp $REC/pretrain.tar.gz

for a in $AGENTS; do
  restore $a
  case $a in
    react) extra=(--agent react) ;;
    reflexion|fcrf) extra=(--agent $a --reflector "$BASE") ;;
    reflexion+sl) extra=(--agent reflexion --reflector "$DPO" --label reflexion+sl) ;;
    reflexion-onfail) extra=(--agent reflexion --reflector "$BASE" --reflect-on failure --label $a) ;;
    reflexion+sl-onfail) extra=(--agent reflexion --reflector "$DPO" --reflect-on failure --label $a) ;;
    muse-onfail) extra=(--agent muse --reflector "$DPO" --scorer $O/pretrain/scorer --reflect-on failure --label $a) ;;
    muse-random) extra=(--agent $a --reflector "$DPO" --scorer $O/pretrain/scorer --decode-only-pick) ;;
    muse*) extra=(--agent $a --reflector "$DPO" --scorer $O/pretrain/scorer) ;;
    *) echo "unknown agent $a" >&2; exit 2 ;;
  esac
  ( while sleep 900; do pack $a || true; done ) &  # a kill loses at most 15 min of records
  packer=$!
  rc=0
  $M run alfworld --out $O/$a "${common[@]}" "${extra[@]}" --tasks 60 --adapt-episodes 2 --episodes 2 \
    --workers 2 >> $O/$a.log 2>&1 || rc=$?
  kill $packer 2>/dev/null || true
  pack $a
  [ $rc = 0 ] || exit $rc
done
# the report covers every agent with committed records, not only those of this call
for a in react reflexion reflexion+sl fcrf muse muse-lowest muse-random reflexion-onfail reflexion+sl-onfail muse-onfail; do
  restore $a
done
$M report alfworld $O --out results/alfworld/run3 >> $O/report.log 2>&1
