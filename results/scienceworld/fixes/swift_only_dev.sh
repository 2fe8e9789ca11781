#!/bin/bash
# Swift-only on dev before/after the fixes (issue 50): 10 tasks x the first dev variation, run 3's ranker
# (results/scienceworld/run3/records/ranker.tar.gz -> ranker/ranker.npz, unpacked to /tmp/r3), the runner's default budget.
# Then: python -c "from metacog_fast.scienceworld.fixes_report import compare; compare('/tmp/swfix/before', '/tmp/swfix/after', 'results/scienceworld/fixes/swift_only_dev')"
# $1 = before|after|easy (easy: after the fixes, --simplifications easy; compare(after, easy, ..., labels=...))
cd /work/main
R=/tmp/swfix/$1
mkdir -p $R && cp /tmp/r3/ranker/ranker.npz $R/ranker.npz
if [ "$1" = before ]; then EXTRA="--sage-trigger fixed --no-loop-guard --no-focus-guard"; elif [ "$1" = easy ]; then EXTRA="--simplifications easy"; else EXTRA=""; fi
exec nice -n 19 .venv/bin/python -m metacog_fast run scienceworld --config baseline --tasks 0,3,6,9,12,15,18,21,24,27 \
  --variations 1 --eval-split dev --warmup 0 --no-use-sage --swift ranker --workers 1 --max-steps 50 --budget-factor 1.5 \
  --no-progress $EXTRA --out $R > /tmp/swfix_$1.log 2>&1
