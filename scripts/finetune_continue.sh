#!/usr/bin/env bash
# The shipped actor trained further on walkthroughs it has not seen (docs/finetune.md, "Session 8"):
# the 1,500 train games after data_rr1200's 1,200 in the same balanced round-robin order are played;
# one pass of LoRA over a seeded sample of EXAMPLES of them (default 640: the part of the 1,500 that
# trains in one session here, ~1.0 M tokens for all 1,500 at ~150-270 tokens/s) starts from the
# shipped adapter (finetuned:alfworld); it is exported merged Q8_0 as finetuned:alfworld-next and
# evaluated on the same 60 valid_train games as every earlier actor, then
# compared (paired) with the shipped actor's evaluation. Every step resumes where it stopped: rerun
# the script after a kill. On this 2-core machine: data ~45 min, SFT of 640 ~45 min, evaluation ~30 min.
#   nohup bash scripts/finetune_continue.sh > runs/finetune/logs/continue.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
R=runs/finetune
EXAMPLES=${EXAMPLES:-640}
mkdir -p "$R/logs"
$M finetune data --out $R/data_next1500 --skip-games 1200 --max-games 1500 --games-dir $R/games_train \
  --workers 2 >> $R/logs/data_next1500.log 2>&1
S=next$EXAMPLES
$M finetune sft --data-dir $R/data_next1500 --out $R/sft_$S --init-adapter finetuned:alfworld \
  --max-examples "$EXAMPLES" --epochs 1 --learning-rate 3e-4 >> $R/logs/sft_$S.log 2>&1
$M finetune export --checkpoint $R/sft_$S --out $R/model_$S --name alfworld-next >> $R/logs/export_$S.log 2>&1
$M finetune eval --llm finetuned:alfworld-next --out $R/eval_${S}_60 --tasks 60 --workers 2 >> $R/logs/eval_$S.log 2>&1
$M finetune compare $R/eval_${S}_60 results/finetune/eval_rr1200_final_60 > $R/compare_${S}_vs_final.json
