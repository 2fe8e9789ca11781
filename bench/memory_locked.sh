#!/usr/bin/env bash
# Runs one memory benchmark command under the shared benchmark lock (docs: the benchmark protocol):
# takes /tmp/metacog_bench.lock, pauses the background jobs listed in /tmp/metacog_pause_pids (and
# the PIDs in $EXTRA_PAUSE, e.g. our own store build), runs "$@", and always resumes them.
#   bash bench/memory_locked.sh env METACOG_BENCH_MEMORY_N=200000 .venv/bin/python -m pytest bench/bench_memory_planner.py ...
set -uo pipefail
exec 9>/tmp/metacog_bench.lock
flock 9
PIDS="$(cat /tmp/metacog_pause_pids 2>/dev/null) ${EXTRA_PAUSE:-}"
resume() { for p in $PIDS; do kill -CONT "$p" 2>/dev/null; done; flock -u 9; }
trap resume EXIT
for p in $PIDS; do kill -STOP "$p" 2>/dev/null; done
sleep 2
echo "[memory_locked] load before: $(cut -d' ' -f1-3 /proc/loadavg); paused: $PIDS"
"$@"
rc=$?
echo "[memory_locked] load after: $(cut -d' ' -f1-3 /proc/loadavg); rc=$rc"
exit $rc
