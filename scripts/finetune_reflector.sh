#!/usr/bin/env bash
# The reflector's pre-deployment (docs/finetune.md, "The reflector: reflection outcomes and DPO"):
#  1. pairs: the shipped actor (finetuned:alfworld, or $ACTOR) plays valid_seen games 0-47 (8 per task
#     type, two halves side by side, one core each); on every failed first attempt the base SmolLM2
#     samples 4 reflections and the actor replays the game after each;
#  2. DPO of the base reflector (LoRA) on the pairs of both halves, exported as a GGUF adapter named
#     finetuned:reflector-dpo;
#  3. reflection quality on valid_seen games 48-77 (5 per type, no pair came from them): the same
#     collection with the base reflector and with the DPO reflector side by side, compared game by game.
# Every step resumes: rerun after a kill. The played games are packed into
# results/finetune/records/reflections.tar.gz after each collection step (commit it), and unpacked
# here when runs/ lacks them, so a fresh checkout replays nothing.
#   nohup bash scripts/finetune_reflector.sh > runs/finetune/logs/reflector.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
R=runs/finetune
ACTOR=${ACTOR:-finetuned:alfworld}
REC=results/finetune/records/reflections.tar.gz
mkdir -p $R/logs
[ -d $R/refl_pairs_a ] || [ ! -f $REC ] || tar -xzf $REC -C $R

pack() {  # the collections' configs and games (not pairs/manifest: the command rewrites them)
  local dirs=() d
  for d in $R/refl_pairs_a $R/refl_pairs_b $R/refl_q_base $R/refl_q_dpo; do
    [ -d $d/games ] && dirs+=("$(basename $d)/config.json" "$(basename $d)/games")
  done
  tar -czf $REC.tmp -C $R "${dirs[@]}" && mv $REC.tmp $REC
}

reflections() {  # OUT SKIP GAMES [flags...]
  local out=$1 skip=$2 games=$3; shift 3
  $M finetune reflections --out $R/$out --actor "$ACTOR" --split valid_seen --skip-games $skip --games $games "$@" \
    >> $R/logs/$out.log 2>&1
}

reflections refl_pairs_a 0 24 &
reflections refl_pairs_b 24 24 &
wait
pack
$M finetune dpo --pairs-dir $R/refl_pairs_a $R/refl_pairs_b --out $R/dpo_reflector >> $R/logs/dpo_reflector.log 2>&1
[ -f $R/model_dpo_reflector/model.json ] || \
  $M finetune export --checkpoint $R/dpo_reflector --out $R/model_dpo_reflector --format adapter \
    --name reflector-dpo >> $R/logs/export_dpo_reflector.log 2>&1
reflections refl_q_base 48 30 &
reflections refl_q_dpo 48 30 --reflector finetuned:reflector-dpo &
wait
pack
$M finetune reflections-compare $R/refl_q_dpo $R/refl_q_base > $R/compare_reflector_dpo_vs_base.json
