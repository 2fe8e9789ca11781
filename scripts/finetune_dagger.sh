#!/usr/bin/env bash
# One DAgger round for the ALFWorld actor (docs/finetune.md, "The hand-coded expert and DAgger"):
# the actor trained on the hand-coded expert (finetuned:alfworld-search, scripts/finetune_handcoded.sh)
# plays 2 x GAMES train games it was not trained on (two collections side by side, one core each);
# the expert labels every state; LoRA continues from that actor's adapter on the union of its own
# training data and the relabelled episodes; exported as finetuned:alfworld-dagger1, evaluated on the
# same 60 valid_train games and compared (paired) with the actor it started from. Every step resumes.
#   nohup bash scripts/finetune_dagger.sh > runs/finetune/logs/dagger.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
R=runs/finetune
GAMES=${GAMES:-150}
mkdir -p "$R/logs"
[ -f $R/model_hc900_adapter/model.json ] || \
  $M finetune export --checkpoint $R/sft_hc900 --out $R/model_hc900_adapter --format adapter >> $R/logs/export_hc900_adapter.log 2>&1
$M finetune dagger --out $R/dagger1_a --actor finetuned:alfworld-search --skip-games 900 --max-games "$GAMES" \
  >> $R/logs/dagger1_a.log 2>&1 &
A=$!
$M finetune dagger --out $R/dagger1_b --actor finetuned:alfworld-search --skip-games $((900 + GAMES)) --max-games "$GAMES" \
  >> $R/logs/dagger1_b.log 2>&1 &
B=$!
wait $A $B
$M finetune sft --data-dir $R/data_hc900 $R/dagger1_a $R/dagger1_b --out $R/sft_dagger1 \
  --init-adapter $R/model_hc900_adapter --epochs 1 --learning-rate 3e-4 >> $R/logs/sft_dagger1.log 2>&1
$M finetune export --checkpoint $R/sft_dagger1 --out $R/model_dagger1 --name alfworld-dagger1 >> $R/logs/export_dagger1.log 2>&1
$M finetune eval --llm finetuned:alfworld-dagger1 --out $R/eval_dagger1_60 --tasks 60 --workers 2 >> $R/logs/eval_dagger1.log 2>&1
$M finetune compare $R/eval_dagger1_60 $R/eval_hc900_60 > $R/compare_dagger1_vs_hc900.json
