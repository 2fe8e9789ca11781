#!/usr/bin/env bash
# The Dreamer-v3 learning runs of docs/muse_wm.md "Single-task learning curves": reach-v3,
# button-press-topdown-v3 and drawer-close-v3, seeds 0 and 1, ONE AT A TIME on one torch thread,
# advanced in rounds of STAGE env steps (all six runs reach about the same step before any goes on).
# Resumable: run it again after a kill and every run continues from its last checkpoint.
# Run folders: runs/metaworld/learn/<task>/seed<seed>; curves copied to
# results/metaworld/learning/runs/<task>/seed<seed>/. It commits nothing.
#
#   nohup bash scripts/metaworld_learning.sh > /tmp/metaworld_learning.log 2>&1 &
#   echo $! >> /tmp/metacog_pause_pids     # the benchmark protocol pauses it (SIGSTOP)
#
# The script execs one Python process (its pid stays the one nohup printed), so SIGSTOP pauses all.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_STEPS="${ENV_STEPS:-200000}"
STAGE="${STAGE:-5000}"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
exec .venv/bin/metacog train learn-all \
  --tasks reach-v3,button-press-topdown-v3,drawer-close-v3 --seeds 0,1 \
  --stage-steps "$STAGE" --env-steps "$ENV_STEPS" --torch-threads 1 --train-ratio 128 \
  --run-root runs/metaworld/learn --out-root results/metaworld/learning/runs \
  "$@"
