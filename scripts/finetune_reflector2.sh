#!/usr/bin/env bash
# The reflector's pre-deployment at a size that can show an effect (docs/finetune.md, "The reflector:
# reflection outcomes and DPO"; the first measurement, scripts/finetune_reflector.sh, had 22 pairs
# from 7 games and no effect):
#  1. pairs: the shipped actor (finetuned:alfworld, or $ACTOR) plays 104 `train` games it was not
#     trained on (1,800-1,847 and 1,900-1,955 of the round-robin order; the DAgger rounds stopped at
#     1,799), two halves side by side, one core each; on every failed first attempt the base SmolLM2
#     samples 8 reflections and the actor replays the game after each one (a failed replay is 50
#     steps: ~1.9 min a game on one core; a collection grows by rerunning it with a larger count);
#  2. DPO of the base reflector (LoRA, the command's defaults) on those pairs, exported as
#     finetuned:reflector-dpo2;
#  3. reflection quality on valid_seen games 48-139 (92 games no pair came from): the base and the DPO
#     reflector side by side, 4 reflections per failed game, compared game by game.
# Every step resumes: rerun after a kill. Once reflector-dpo2 ships in the package, a rerun uses it as
# it is instead of training it again (RETRAIN=1 trains and exports it anew). The played games are packed into
# results/finetune/records/reflections2.tar.gz after each collection step (commit it) and unpacked here
# when runs/ lacks them. On this 2-core machine: pairs ~90 min, DPO ~1 h, quality ~1.5 h.
#   nohup bash scripts/finetune_reflector2.sh > runs/finetune/logs/reflector2.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
R=runs/finetune
ACTOR=${ACTOR:-finetuned:alfworld}
REC=results/finetune/records/reflections2.tar.gz
mkdir -p $R/logs
[ -d $R/refl2_pairs_a ] || [ ! -f $REC ] || tar -xzf $REC -C $R

pack() {  # the collections' configs, model identities and games (not pairs/manifest: rewritten by the command)
  local dirs=() d
  for d in $R/refl2_pairs_a $R/refl2_pairs_b $R/refl2_q_base $R/refl2_q_dpo; do
    [ -d $d/games ] && dirs+=("$(basename $d)/config.json" "$(basename $d)/games")
    [ -f $d/identity.json ] && dirs+=("$(basename $d)/identity.json")
  done
  tar -czf $REC.tmp -C $R "${dirs[@]}" && mv $REC.tmp $REC
}

reflections() {  # OUT SPLIT SKIP GAMES [flags...]
  local out=$1 split=$2 skip=$3 games=$4; shift 4
  $M finetune reflections --out $R/$out --actor "$ACTOR" --split $split --skip-games $skip --games $games "$@" \
    >> $R/logs/$out.log 2>&1
}

reflections refl2_pairs_a train 1800 48 --reflections 8 &
reflections refl2_pairs_b train 1900 56 --reflections 8 &
wait
pack
SHIPPED=metacog_fast/llm/finetuned/reflector-dpo2
if [ -n "${RETRAIN:-}" ] || [ ! -f $SHIPPED/model.json ]; then  # the shipped adapter is used as it is
  $M finetune dpo --pairs-dir $R/refl2_pairs_a $R/refl2_pairs_b --out $R/dpo_reflector2 >> $R/logs/dpo_reflector2.log 2>&1
  [ -f $R/model_dpo_reflector2/model.json ] || \
    $M finetune export --checkpoint $R/dpo_reflector2 --out $R/model_dpo_reflector2 --format adapter \
      --name reflector-dpo2 >> $R/logs/export_dpo_reflector2.log 2>&1
fi
ADAPTER=$R/model_dpo_reflector2
[ -f $ADAPTER/model.json ] || ADAPTER=$SHIPPED
reflections refl2_q_base valid_seen 48 92 &
reflections refl2_q_dpo valid_seen 48 92 --reflector finetuned:reflector-dpo2 &
wait
pack
$M finetune reflections-compare $R/refl2_q_dpo $R/refl2_q_base > $R/compare_reflector_dpo2_vs_base.json
for d in refl2_pairs_a refl2_pairs_b refl2_q_base refl2_q_dpo; do cp $R/$d/manifest.json results/finetune/${d}_manifest.json; done
cp $R/compare_reflector_dpo2_vs_base.json results/finetune/
# Shipped in the package whatever the comparison says (the agents' tables need a DPO reflector on a
# fresh machine); its model.json carries the comparison, so the effect, or its absence, travels with it.
.venv/bin/python scripts/ship_model.py --adapter $ADAPTER --role reflector --name reflector-dpo2 \
  --evaluation $R/compare_reflector_dpo2_vs_base.json \
  --record "results/finetune/compare_reflector_dpo2_vs_base.json (games in results/finetune/records/reflections2.tar.gz)" \
  --reproduce "bash scripts/finetune_reflector2.sh   # unpacks the committed games, rebuilds the pairs, trains DPO, exports, measures" \
  --description "SmolLM2-135M-Instruct + LoRA r16 (all linear layers), DPO (beta 0.1, 2 epochs) on preference pairs of the base model's own reflections on ALFWorld train games: a reflection after which the shipped actor's next attempt won vs one after which it failed"
