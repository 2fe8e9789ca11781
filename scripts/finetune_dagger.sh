#!/usr/bin/env bash
# DAgger round 1 (docs/finetune.md, "The hand-coded expert and DAgger" and "Session 10"): the actor of
# round 0 (finetuned:alfworld-dagger0, scripts/finetune_dagger0.sh) plays 200 more train games it has
# never seen (1,400-1,599; two collections side by side, one core each) and the hand-coded expert
# labels every state. As DAgger prescribes, the next actor is trained on the aggregate: LoRA from
# the walkthrough actor's adapter (as in round 0) on data_hc900 and the relabelled episodes of both
# rounds, with the options of round 0. Exported merged Q8_0 as finetuned:alfworld-dagger1, evaluated
# on the same 60 valid_train games and compared (paired) with round 0. The collections are committed
# under results/finetune/records, so a fresh checkout needs neither round's actor to go on: only
# training, export and evaluation remain.
# Every step resumes where it stopped: rerun the script after a kill. On this 2-core machine:
# collections ~25 min, SFT ~95 min, evaluation ~30 min.
#   nohup bash scripts/finetune_dagger.sh > runs/finetune/logs/dagger1.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
R=runs/finetune
mkdir -p "$R/logs"
# The walkthrough actor that shipped until session 10 (finetuned:alfworld then; sha256 ef713440...):
# round 0's actor and the adapter every round starts from, taken back out of the repository's history.
W=$R/adapter_rr1200
if [ ! -f $W/model.json ]; then
  mkdir -p $W
  for f in model.json adapter.gguf; do git show 262b4baab9:metacog_fast/llm/finetuned/alfworld/$f > $W/$f.tmp; mv $W/$f.tmp $W/$f; done
fi
for rec in handcoded_train_games:games_train dagger0:dagger0_a dagger1:dagger1_a; do
  [ -d $R/${rec#*:} ] || [ ! -f results/finetune/records/${rec%:*}.tar.gz ] || \
    tar -xzf results/finetune/records/${rec%:*}.tar.gz -C $R
done
$M finetune data --out $R/data_hc900 --expert handcoded --max-games 900 --games-dir $R/games_train \
  --workers 2 >> $R/logs/data_hc900.log 2>&1
for half in a:1400 b:1500; do
  [ -f $R/dagger1_${half%:*}/manifest.json ] || $M finetune dagger --out $R/dagger1_${half%:*} --actor finetuned:alfworld-dagger0 --skip-games ${half#*:} \
    --max-games 100 >> $R/logs/dagger1_${half%:*}.log 2>&1 &
done
wait
S=dagger1
$M finetune sft --data-dir $R/data_hc900 $R/dagger0_a $R/dagger0_b $R/dagger1_a $R/dagger1_b --out $R/sft_$S \
  --init-adapter $W --epochs 1 --learning-rate 5e-4 --max-length 2048 >> $R/logs/sft_$S.log 2>&1
$M finetune export --checkpoint $R/sft_$S --out $R/model_$S --name alfworld-$S >> $R/logs/export_$S.log 2>&1
[ -f $R/model_${S}_adapter/model.json ] || \
  $M finetune export --checkpoint $R/sft_$S --out $R/model_${S}_adapter --format adapter >> $R/logs/export_${S}_adapter.log 2>&1
$M finetune eval --llm finetuned:alfworld-$S --out $R/eval_${S}_60 --tasks 60 --workers 2 >> $R/logs/eval_$S.log 2>&1
$M finetune compare $R/eval_${S}_60 results/finetune/eval_dagger0_60 > $R/compare_${S}_vs_dagger0.json
$M finetune compare $R/eval_${S}_60 results/finetune/eval_rr1200_final_60 > $R/compare_${S}_vs_final.json
