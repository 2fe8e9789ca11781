#!/usr/bin/env bash
# The full-size ScienceWorld Swift fine-tuning of docs/finetune.md ("ScienceWorld"), step by step;
# every step resumes where it stopped, so rerunning this script after a kill (or in a later
# session) continues the work.
#   nohup bash scripts/finetune_scienceworld.sh &           # THREADS=2 WORKERS=2 on an idle machine
# Logs: runs/finetune_sw/logs/*.log. Cost on this 2-core machine (measured on the 90-variation set,
# docs/finetune.md "ScienceWorld"): a gold path takes ~7-10 s to play (39 steps on average), so all
# 3,592 train variations take ~5 h with 2 workers; a decision is ~102 tokens and training ran at
# 78-114 tokens/s on one shared thread, so the default budget of 20,000 decisions (~2 M tokens) is
# ~5 h at THREADS=1 and ~2 h at the idle benchmark's 271 tokens/s (THREADS=2); the dev agreement ~10 min.
set -euo pipefail
cd "$(dirname "$0")/.."
M=.venv/bin/metacog
R=runs/finetune_sw
THREADS=${THREADS:-1}
WORKERS=${WORKERS:-1}
MAX_EXAMPLES=${MAX_EXAMPLES:-20000}
mkdir -p "$R/logs"
# gold paths of every train variation of the 30 tasks, played in the simulator (dev and test never)
$M finetune data --env scienceworld --out $R/data_train --workers "$WORKERS" >> $R/logs/data_train.log 2>&1
# one epoch of LoRA (r 16) on a seeded sample of the decisions: the LLM Swift's prompt -> the gold option
$M finetune sft --data-dir $R/data_train --out $R/sft_train --sources scienceworld_gold --epochs 1 \
  --learning-rate 5e-4 --max-length 512 --max-examples "$MAX_EXAMPLES" --save-steps 25 --threads "$THREADS" \
  >> $R/logs/sft_train.log 2>&1
# merged Q8_0 (decodes at the base's speed), installed as finetuned:scienceworld-full
$M finetune export --checkpoint $R/sft_train --out $R/model_train --name scienceworld-full >> $R/logs/export_train.log 2>&1
# top-1 agreement with the expert on the same held-out dev gold steps as the committed measurement
$M finetune swift-eval --out $R/agreement_train --llms base,finetuned:scienceworld-full --steps-per-task 4 \
  >> $R/logs/agreement_train.log 2>&1
