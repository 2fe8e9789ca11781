#!/usr/bin/env bash
# One-shot GPU check of the RSSM CUDA and Triton kernels (docs/kernels_gpu.md).
#
#   bench/gpu_check.sh            # on a machine with an NVIDIA GPU and nvcc; <= 10 minutes
#
# Steps (each under its own time limit inside a budget of GPU_CHECK_BUDGET=560 s, so the
# whole run fits in 10 minutes; a step that finds the budget spent is skipped):
#   1. find a Python whose torch sees the GPU (PYTHON, .venv, python3, python); if none,
#      try to make one: a venv with --system-site-packages, packages from a local wheel
#      folder (METACOG_WHEELHOUSE, `pip download -d DIR torch==2.13.0 pytest pytest-benchmark
#      pybind11 cmake ninja numpy`) or from the package index when the machine has one;
#   2. build the compiled core with METACOG_BACKEND=cuda into $BUILD (scripts/dev_build.sh);
#   3. print metacog_fast.backends();
#   4. pytest tests/ops/rssm/test_rssm_cuda.py -m "gpu or not gpu" (less the CPU-only host-emulation tests);
#   5. pytest bench/bench_rssm_gpu.py -k cuda --benchmark-json=$OUT/rssm_gpu.json, then -k triton
#      into $OUT/rssm_gpu_triton.json (each speed-up printed with its target);
#   6. metacog finetune sft on the GPU: one LoRA epoch over runs/finetune/data_rr1200 (tokens/s, loss);
#   7. pytest tests/ops/rssm/test_rssm_triton.py -m "gpu or not gpu" (last: Triton compiles every variant).
# Everything (log, junit xml, benchmark json, nvidia-smi) goes to $OUT (default
# bench/results/gpu_check). The machine may have no network: missing packages are reported,
# and every step that can still run does. Exit status: 0 when every step that ran passed.
# GPU_CHECK_NO_INSTALL=1: never pip install. GPU_CHECK_ALLOW_CPU=1: dry run without a GPU
# (build, backends, compile and emulation tests; GPU tests and benchmarks skip).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/bench/results/gpu_check}
BUILD=${BUILD:-/tmp/metacog_build_cuda}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
export PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
START=$(date +%s)
STATUS=0
BUDGET=${GPU_CHECK_BUDGET:-560}  # seconds for the whole script (the device runner allows 600)
# limit N: N seconds, or what is left of the budget if less (0 when under 15 s are left)
limit() { local left=$(( BUDGET - ($(date +%s) - START) )); [ "$left" -lt 15 ] && { echo 0; return; }; [ "$1" -lt "$left" ] && echo "$1" || echo "$left"; }
# run_limited N cmd...: cmd under `timeout limit(N)`; skipped (status 124) when the budget is spent
run_limited() { local l; l=$(limit "$1"); shift; if [ "$l" -eq 0 ]; then echo "  skipped (time budget spent): $*"; return 124; fi; timeout "$l" "$@"; }
step() { echo; echo "=== [gpu_check +$(( $(date +%s) - START ))s] $*"; }
fail() { echo "!!! $*"; STATUS=1; }

step "machine"
nvidia-smi 2>&1 | tee "$OUT/nvidia-smi.txt" | head -20 || echo "nvidia-smi not available"
NVCC=$(command -v nvcc || { [ -x /usr/local/cuda/bin/nvcc ] && echo /usr/local/cuda/bin/nvcc; } || true)
if [ -n "$NVCC" ]; then
  export PATH="$(dirname "$NVCC"):$PATH"
  "$NVCC" --version | tail -2
else
  echo "nvcc not found: the CUDA build and the CUDA tests will be skipped"
fi
echo "cpus: $(nproc)"

has_cuda_torch() { "$1" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; }

step "python with a CUDA torch"
PY=""
for cand in "${PYTHON:-}" "$ROOT/.venv/bin/python" python3 python; do
  [ -n "$cand" ] || continue
  command -v "$cand" >/dev/null 2>&1 || continue
  if has_cuda_torch "$cand"; then PY=$(command -v "$cand"); break; fi
  echo "  $cand: no torch with CUDA"
done
pip_get() {  # pip_get PY pkg... : local wheels first, then the index if reachable
  local py=$1; shift
  if [ -n "${METACOG_WHEELHOUSE:-}" ] && [ -d "$METACOG_WHEELHOUSE" ]; then
    run_limited 120 "$py" -m pip install -q --no-index --find-links "$METACOG_WHEELHOUSE" "$@" && return 0
  fi
  run_limited 120 "$py" -m pip install -q --retries 0 --timeout 5 "$@"
}
if [ -z "$PY" ] && [ "${GPU_CHECK_ALLOW_CPU:-0}" = 1 ]; then
  # dry run on a machine without a GPU: any Python with torch (GPU tests and benchmarks skip)
  for cand in "${PYTHON:-}" "$ROOT/.venv/bin/python" python3 python; do
    [ -n "$cand" ] && command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch" >/dev/null 2>&1 \
      && { PY=$(command -v "$cand"); echo "  GPU_CHECK_ALLOW_CPU=1: using $PY without a GPU"; break; }
  done
fi
if [ -z "$PY" ] && [ "${GPU_CHECK_NO_INSTALL:-0}" != 1 ]; then
  BASE=$(command -v python3 || command -v python || true)
  if [ -n "$BASE" ]; then
    VENV=/tmp/metacog_gpu_venv
    [ -x "$VENV/bin/python" ] || "$BASE" -m venv --system-site-packages "$VENV"
    # torch pinned, never left for pip to choose
    pip_get "$VENV/bin/python" torch==2.13.0 || echo "  could not install torch==2.13.0 (no network / wheelhouse?)"
    has_cuda_torch "$VENV/bin/python" && PY=$VENV/bin/python
  fi
fi
if [ -z "$PY" ]; then
  fail "no Python with a CUDA-enabled torch: only the nvcc compile check can run"
  if [ -n "$NVCC" ]; then
    step "nvcc compile check only"
    "$NVCC" -std=c++17 -O3 -arch=sm_${METACOG_CUDA_ARCHITECTURES:-90} -Icsrc -c csrc/cuda/rssm.cu -o /tmp/rssm_check.o \
      && echo "rssm.cu compiles" || fail "rssm.cu does not compile"
  fi
  exit 1
fi
echo "python: $PY"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"

step "build and test packages"
PYBIN=$(dirname "$PY")
export PATH="$PYBIN:$PATH"
for mod_pkg in numpy:numpy pybind11:pybind11 pytest:pytest pytest_benchmark:pytest-benchmark triton:triton cmake:cmake; do
  mod=${mod_pkg%%:*}; pkg=${mod_pkg##*:}
  if [ "$mod" = cmake ] && command -v cmake >/dev/null 2>&1; then continue; fi
  if ! "$PY" -c "import $mod" >/dev/null 2>&1 && [ "${GPU_CHECK_NO_INSTALL:-0}" != 1 ]; then
    echo "  $mod missing: trying to install $pkg"
    pip_get "$PY" "$pkg" torch==2.13.0 >/dev/null 2>&1 || pip_get "$PY" "$pkg" || echo "  could not install $pkg"
  fi
done
"$PY" - <<'EOF'
import importlib
for m in ("numpy", "pybind11", "pytest", "pytest_benchmark", "triton"):
    try:
        mod = importlib.import_module(m)
        print(f"  {m:18s} {getattr(mod, '__version__', '?')}")
    except Exception as exc:
        print(f"  {m:18s} MISSING ({exc.__class__.__name__})")
EOF

step "build the CUDA core (METACOG_BACKEND=cuda) into $BUILD"
BUILT=0
if [ -n "$NVCC" ] && command -v cmake >/dev/null 2>&1 && "$PY" -c "import pybind11" >/dev/null 2>&1; then
  export METACOG_BACKEND=cuda PYTHON="$PY"
  if run_limited 180 scripts/dev_build.sh "$BUILD" > "$OUT/build.log" 2>&1; then
    BUILT=1
    export METACOG_CORE_PATH="$BUILD"
    echo "built: METACOG_CORE_PATH=$BUILD"
  else
    fail "CUDA build failed (tail of $OUT/build.log):"
    tail -30 "$OUT/build.log"
  fi
else
  fail "cannot build: needs nvcc, cmake and pybind11"
fi

step "metacog_fast.backends()"
"$PY" -c "import json, metacog_fast; print(json.dumps(metacog_fast.backends(), indent=1, default=str))" \
  | tee "$OUT/backends.json" || fail "metacog_fast does not import"

if "$PY" -c "import pytest" >/dev/null 2>&1; then
  step "tests (CUDA first, then Triton compiled for the GPU)"
  # left out here: the host-emulation tests (CPU only, slow; the real GPU runs the same checks)
  # and the slow full nvcc object compile (the build above just did it)
  run_limited 120 "$PY" -m pytest tests/ops/rssm/test_rssm_cuda.py -m "gpu or not gpu" -k "not emulated and not compile_object" -v -rs \
    --junitxml="$OUT/junit_cuda.xml" -p no:cacheprovider || fail "CUDA tests failed or timed out"
  if "$PY" -c "import pytest_benchmark" >/dev/null 2>&1; then
    # CUDA first, then Triton (whose first calls compile): a Triton timeout cannot cost the CUDA numbers
    for be in cuda triton; do
      step "benchmarks ($be)"
      json="$OUT/rssm_gpu.json"; [ "$be" = triton ] && json="$OUT/rssm_gpu_triton.json"
      lim=80; [ "$be" = triton ] && lim=130
      run_limited "$lim" "$PY" -m pytest bench/bench_rssm_gpu.py -k "$be" -q -p no:cacheprovider \
        --benchmark-json="$json" --benchmark-columns=mean,median,stddev,rounds
      rc=$?
      if [ "$rc" -eq 5 ]; then echo "  benchmarks skipped (no CUDA device)"; elif [ "$rc" -ne 0 ]; then fail "$be benchmarks failed or timed out"; fi
      if [ -f "$json" ]; then
        "$PY" - "$json" <<'EOF'
import json, sys
data = json.load(open(sys.argv[1]))
for b in data["benchmarks"]:
    e = b["extra_info"]
    print(f"  {b['name']:45s} {e['candidate_ms']:9.3f} ms  eager {e['anchor_ms']:9.3f} ms  "
          f"speedup {e['speedup_vs_eager']:6.1f}x (target {e['target']}x)")
EOF
      fi
    done
  else
    fail "pytest-benchmark missing: benchmarks not run (provide it in METACOG_WHEELHOUSE)"
  fi
  step "fine-tuning on the GPU (LoRA SFT, one epoch; docs/finetune.md)"
  # needs the [finetune] extra and a dataset built here (carry runs/finetune/data_rr1200, 1.7 MB)
  FT_DATA=${METACOG_FT_DATA:-$ROOT/runs/finetune/data_rr1200}
  if ! "$PY" -c "import transformers, peft, trl, datasets, accelerate, gguf" >/dev/null 2>&1; then
    echo "  skipped: the [finetune] extra (transformers, peft, trl, datasets, accelerate, gguf) is not installed"
  elif [ ! -f "$FT_DATA/dataset.jsonl" ]; then
    echo "  skipped: no dataset at $FT_DATA (build it with metacog finetune data, or set METACOG_FT_DATA)"
  else
    rm -rf "$OUT/ft_gpu"
    run_limited 200 "$PY" -m metacog_fast finetune sft --data-dir "$FT_DATA" --out "$OUT/ft_gpu" --epochs 1 \
      --learning-rate 5e-4 --device cuda --save-steps 100000 > "$OUT/ft_gpu.log" 2>&1 || fail "GPU fine-tuning failed or timed out (tail of $OUT/ft_gpu.log):"
    tail -5 "$OUT/ft_gpu.log"
    [ -f "$OUT/ft_gpu/facts.json" ] && "$PY" -c "import json,sys; f=json.load(open(sys.argv[1])); print('  examples', f['examples'], 'tokens/s', round(f['tokens_per_second_this_call']), 'final loss', round(f['final_train_loss'], 4))" "$OUT/ft_gpu/facts.json"
    rm -rf "$OUT/ft_gpu/checkpoints" "$OUT/ft_gpu/final"  # weights do not come back; the log and facts do
  fi
  step "Triton tests on the GPU"
  run_limited 300 "$PY" -m pytest tests/ops/rssm/test_rssm_triton.py -m "gpu or not gpu" -v -rs \
    --junitxml="$OUT/junit_triton.xml" -p no:cacheprovider || fail "Triton tests failed or timed out"
else
  fail "pytest missing: no tests run"
fi

step "done in $(( $(date +%s) - START ))s, status $STATUS; outputs in $OUT"
ls -la "$OUT"
exit $STATUS
