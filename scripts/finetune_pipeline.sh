#!/usr/bin/env bash
# The fine-tuning pipeline of docs/finetune.md, step by step; every step resumes where it stopped,
# so rerunning this script after a kill (or in a later session) continues the work.
#   bash scripts/finetune_pipeline.sh            # in the background: nohup bash scripts/finetune_pipeline.sh &
# Logs: runs/finetune/logs/*.log. Plan on 2 cores: the dataset ~30 min, each SFT epoch over all
# 3,553 walkthroughs ~1.5 h, an evaluation of 60 games ~30 min, the reflections of 60 games hours.
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
R=runs/finetune
mkdir -p "$R/logs"
# the shipped actor with the admissible-action mapping (its own reported configuration)
$M finetune eval --llm finetuned:alfworld --out $R/eval_shipped_embed_60 --tasks 60 --map-actions embed --workers 2 >> $R/logs/eval_shipped_embed.log 2>&1
# every train walkthrough, played in the real environment
$M finetune data --out $R/data_train --workers 2 >> $R/logs/data_train.log 2>&1
# two epochs of LoRA over them (actions-only loss), exported merged Q8_0 as finetuned:alfworld-full
$M finetune sft --data-dir $R/data_train --out $R/sft_full_actions --epochs 2 --learning-rate 5e-4 >> $R/logs/sft_full.log 2>&1
$M finetune export --checkpoint $R/sft_full_actions --out $R/model_full_actions --name alfworld-full >> $R/logs/export_full.log 2>&1
# the same 60 valid_train games as every earlier evaluation
$M finetune eval --llm finetuned:alfworld-full --out $R/eval_full_60 --tasks 60 --workers 2 >> $R/logs/eval_full.log 2>&1
# that actor's own self-assessment scorer from its 60 evaluation episodes (held-out-game AUROC2 in scorer.json)
$M finetune scorer --episodes $R/eval_full_60 --out $R/scorer_full >> $R/logs/scorer_full.log 2>&1
# reflection outcomes on valid_seen with that actor: DPO pairs and the base reflector's quality
$M finetune reflections --out $R/reflections_full --actor finetuned:alfworld-full --games 60 >> $R/logs/reflections.log 2>&1
