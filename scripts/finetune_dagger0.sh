#!/usr/bin/env bash
# DAgger from the walkthrough actor (docs/finetune.md, "Session 10"): the actor that shipped as
# finetuned:alfworld until session 10 (trained on the walkthroughs of the first 1,200 train games of
# the balanced order; restored below from the repository's history) plays 200 train games it has never seen (1,200-1,399, two collections side by side, one core
# each); the hand-coded expert labels every state (beta 0.5). LoRA continues from its adapter
# on the union of data_hc900 (the expert's own episodes) and the relabelled episodes, with the
# options of scripts/finetune_handcoded.sh but transcripts cut at 2,048 tokens instead of 1,024 (the
# longest is ~1,750, so none is cut; at 1,024 the last commands of the longest searches, which the
# actor sees in full at inference, were never trained on). The comparison with
# finetuned:alfworld-search therefore measures both changes together. Exported merged Q8_0 as
# finetuned:alfworld-dagger0 (and as an adapter), evaluated on the same 60 valid_train games and
# compared (paired) with the searching actor and the shipped one. Every step resumes where it
# stopped: rerun the script after a kill. On this 2-core machine: data and collections ~35 min,
# SFT ~85 min, evaluation ~30 min.
#   nohup bash scripts/finetune_dagger0.sh > runs/finetune/logs/dagger0.out 2>&1 &
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/finetune_dagger_lib.sh
prepare
dagger_collect dagger0 "llama-cpp:///$PWD/$W" 1200
train_export_eval dagger0 $R/data_hc900 $R/dagger0_a $R/dagger0_b
$M finetune compare $R/eval_dagger0_60 results/finetune/eval_hc900_60 > $R/compare_dagger0_vs_hc900.json
$M finetune compare $R/eval_dagger0_60 results/finetune/eval_rr1200_final_60 > $R/compare_dagger0_vs_final.json
