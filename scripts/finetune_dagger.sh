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
. scripts/finetune_dagger_lib.sh
prepare
dagger_collect dagger1 finetuned:alfworld-dagger0 1400
train_export_eval dagger1 $R/data_hc900 $R/dagger0_a $R/dagger0_b $R/dagger1_a $R/dagger1_b
$M finetune compare $R/eval_dagger1_60 results/finetune/eval_dagger0_60 > $R/compare_dagger1_vs_dagger0.json
$M finetune compare $R/eval_dagger1_60 results/finetune/eval_rr1200_final_60 > $R/compare_dagger1_vs_final.json
