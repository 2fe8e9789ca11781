#!/usr/bin/env bash
# DAgger round 2 (docs/finetune.md, "Session 12"): the round-1 actor (scripts/finetune_dagger.sh) played
# 200 more unseen train games (1,600-1,799) and the hand-coded expert labelled every state; the records
# are committed in results/finetune/records/dagger2.tar.gz, so this needs no earlier actor. The next
# actor is trained on the aggregate of all three rounds (LoRA from the walkthrough actor's adapter, the
# options of rounds 0 and 1), exported as an adapter, evaluated in that form on 120 valid_train games
# and compared (paired) with the shipped round-0 adapter and the round-1 adapter on the same 120.
# It ships only if it beats the shipped actor at 5 % (McNemar): scripts/ship_model.py does that part.
# Every step resumes: rerun after a kill. On this 2-core machine: SFT ~100 min, evaluation ~15 min.
#   nohup bash scripts/finetune_dagger2.sh > runs/finetune/logs/dagger2.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/finetune_dagger_lib.sh
prepare
S=dagger2
train_adapter $S $R/data_hc900 $R/dagger0_a $R/dagger0_b $R/dagger1_a $R/dagger1_b $R/dagger2_a $R/dagger2_b
$M finetune eval --llm "llama-cpp://$PWD/$R/model_${S}_adapter" --out $R/eval_${S}_adapter_120 --tasks 120 --workers 2 \
  >> $R/logs/eval_${S}_adapter_120.log 2>&1
$M finetune compare $R/eval_${S}_adapter_120 results/finetune/eval_dagger0_shipped_120 > $R/compare_${S}_vs_dagger0_120.json
$M finetune compare $R/eval_${S}_adapter_120 results/finetune/eval_dagger1_adapter_120 > $R/compare_${S}_vs_dagger1_120.json
