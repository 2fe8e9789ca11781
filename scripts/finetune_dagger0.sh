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
# The expert's played games (and the DAgger collections) are committed under results/finetune/records,
# so a fresh checkout replays none of them; the builders only check and index them.
[ -d $R/games_train ] || tar -xzf results/finetune/records/handcoded_train_games.tar.gz -C $R
[ -d $R/dagger0_a ] || tar -xzf results/finetune/records/dagger0.tar.gz -C $R
$M finetune data --out $R/data_hc900 --expert handcoded --max-games 900 --games-dir $R/games_train \
  --workers 2 >> $R/logs/data_hc900.log 2>&1
[ -f $R/dagger0_a/manifest.json ] || $M finetune dagger --out $R/dagger0_a --actor llama-cpp:///$PWD/$W --skip-games 1200 --max-games 100 \
  >> $R/logs/dagger0_a.log 2>&1 &
A=$!
[ -f $R/dagger0_b/manifest.json ] || $M finetune dagger --out $R/dagger0_b --actor llama-cpp:///$PWD/$W --skip-games 1300 --max-games 100 \
  >> $R/logs/dagger0_b.log 2>&1 &
B=$!
wait $A $B
S=dagger0
$M finetune sft --data-dir $R/data_hc900 $R/dagger0_a $R/dagger0_b --out $R/sft_$S --init-adapter $W \
  --epochs 1 --learning-rate 5e-4 --max-length 2048 >> $R/logs/sft_$S.log 2>&1
$M finetune export --checkpoint $R/sft_$S --out $R/model_$S --name alfworld-$S >> $R/logs/export_$S.log 2>&1
[ -f $R/model_${S}_adapter/model.json ] || \
  $M finetune export --checkpoint $R/sft_$S --out $R/model_${S}_adapter --format adapter >> $R/logs/export_${S}_adapter.log 2>&1
$M finetune eval --llm finetuned:alfworld-$S --out $R/eval_${S}_60 --tasks 60 --workers 2 >> $R/logs/eval_$S.log 2>&1
$M finetune compare $R/eval_${S}_60 results/finetune/eval_hc900_60 > $R/compare_${S}_vs_hc900.json
$M finetune compare $R/eval_${S}_60 results/finetune/eval_rr1200_final_60 > $R/compare_${S}_vs_final.json
