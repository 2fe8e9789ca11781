#!/usr/bin/env bash
# The re-measurement of the papers' tables (docs/*: "Run 3" / "Re-measurement" sections), one family
# after another on this machine's two cores, each through its own resumable script:
#   1. ALFWorld MUSE (scripts/alfworld_tables.sh; ~2 h left after session 17)
#   2. ALFWorld MUSE-random (decoding only its pick: a fraction of MUSE's ~10 h)
#   3. experience memory (scripts/experience_tables.sh; ~1-2 h)
#   4. generative agents (scripts/sim_tables.sh; ~2 h)
#   5. ScienceWorld (scripts/scienceworld_tables.sh; ~8 h)
#   6. ALFWorld MUSE-lowest (~10 h)
#   alfworld-onfail (not in the default STEPS): Reflexion and Reflexion + SL reflecting only after
#     failures (~40 min each)
#   alfworld-muse-onfail (not in the default STEPS): MUSE reflecting only after failures (~10 h)
# A step that fails is logged and the queue goes on to the next; a rerun (after a kill or in a new
# session) skips nothing by itself: every script resumes from its committed records and plays only
# what is missing, so a finished step costs only its check. The records each script packs under
# results/ are what to commit while it runs. STEPS="sim scienceworld" runs some of them.
#   mkdir -p runs && nohup bash scripts/remeasure_queue.sh > runs/remeasure_queue.out 2>&1 &
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-"alfworld-muse alfworld-random experience sim scienceworld alfworld-lowest"}
mkdir -p runs/alfworld3 runs/experience3 runs/sim3 runs/scienceworld3

for step in $STEPS; do
  echo "[queue] $(date -u +%FT%TZ) start $step"
  case $step in
    alfworld-muse) AGENTS=muse bash scripts/alfworld_tables.sh > runs/alfworld3/tables.out 2>&1 ;;
    experience) bash scripts/experience_tables.sh > runs/experience3/tables.out 2>&1 ;;
    sim) bash scripts/sim_tables.sh > runs/sim3/tables.out 2>&1 ;;
    scienceworld) bash scripts/scienceworld_tables.sh > runs/scienceworld3/tables.out 2>&1 ;;
    alfworld-random) AGENTS=muse-random bash scripts/alfworld_tables.sh >> runs/alfworld3/tables.out 2>&1 ;;
    alfworld-onfail) AGENTS="reflexion-onfail reflexion+sl-onfail" bash scripts/alfworld_tables.sh >> runs/alfworld3/tables.out 2>&1 ;;
    alfworld-muse-onfail) AGENTS=muse-onfail bash scripts/alfworld_tables.sh >> runs/alfworld3/tables.out 2>&1 ;;
    alfworld-lowest) AGENTS=muse-lowest bash scripts/alfworld_tables.sh >> runs/alfworld3/tables.out 2>&1 ;;
    *) echo "[queue] unknown step $step" >&2; false ;;
  esac
  rc=$?
  echo "[queue] $(date -u +%FT%TZ) end $step rc=$rc"
done
