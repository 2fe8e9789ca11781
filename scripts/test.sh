#!/usr/bin/env bash
# Installs if needed (scripts/setup.sh), then runs the test suite without the
# tests marked slow or gpu. Extra arguments go to pytest.
#   bash scripts/test.sh                 # what CI runs
#   bash scripts/test.sh -m slow         # the long tests
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || { echo "[test] setup failed"; exit 1; }
# shellcheck disable=SC1091
. .venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if [ "$#" -eq 0 ]; then
  set -- -m "not slow and not gpu"
fi
# --durations: the slowest tests are named in every run's summary, so that a slow one is seen.
# -n: pytest-xdist workers, one per core up to 4 (METACOG_TEST_WORKERS overrides; 0 runs in this
# process). Tests that compare timings do not exist; each test picks its own free ports and folders.
workers=${METACOG_TEST_WORKERS:-$(python -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}
python -m pytest tests/ --timeout=900 --durations=15 -n "$workers" --dist worksteal "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test] pytest collected no tests: that is a failure of the suite, not a pass"
  exit 1
fi
exit "$rc"
