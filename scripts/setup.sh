#!/usr/bin/env bash
# Installs everything into .venv in this checkout: torch (CPU, pinned, first),
# the build tools, metacog_fast itself (compiled core) with every runtime extra and
# the test tools, and unpacks the ALFWorld games from ../shared/data when present.
# Idempotent: a second run only checks.
#   METACOG_BACKEND=cuda scripts/setup.sh   builds the CUDA path too (needs nvcc)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
# Extras installed beside the core (pyproject.toml, docs/install.md): `all` is every runtime extra
# (alfworld scienceworld metaworld llm ray finetune triton); [gpu] (vLLM) is for GPU machines.
#   METACOG_EXTRAS=test scripts/setup.sh          the core alone (kernels, memory, scoring) and pytest
METACOG_EXTRAS=${METACOG_EXTRAS:-test all}

if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1

python -m pip install -q --upgrade pip
# torch first and pinned: anything that lets pip choose pulls a multi-GB CUDA build.
python -m pip install -q torch==2.13.0
# The project's own build runs without isolation and needs only these tools; numpy
# is here because several sdists' setup scripts import it.
python -m pip install -q "scikit-build-core>=0.10" "pybind11>=2.13" cmake ninja numpy setuptools wheel

stamp=.venv/.metacog_build_stamp
src_hash=$(cat pyproject.toml scripts/setup.sh CMakeLists.txt $(find csrc -type f | sort) | sha1sum | cut -d' ' -f1)-${METACOG_BACKEND:-cpu}-${METACOG_EXTRAS// /,}
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$src_hash" ] || ! python -c "import metacog_fast._core" 2>/dev/null; then
  echo "[setup] building metacog_fast (backend=${METACOG_BACKEND:-cpu}); the first build also compiles llama.cpp (several minutes)"
  # The dependencies install with build isolation (an sdist such as hnswlib or
  # llama-cpp-python builds in its own environment, as on a machine that never saw
  # this project); only the project itself builds without it.
  # The requirements in pyproject.toml: the core's and those of each extra named. An extra that
  # names the project itself (as [all] does) is expanded here: pip must not look for it on an index.
  deps_txt=$(METACOG_EXTRAS="$METACOG_EXTRAS" python - <<'EOF'
import os
import re
import sys
import tomllib

with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
extras = project.get("optional-dependencies", {})
self_ref = re.compile(r"^metacog[-_]fast\[([^]]+)\]$", re.IGNORECASE)
reqs, seen = list(project["dependencies"]), set()


def add(name: str) -> None:
    if name not in extras:
        sys.exit(f"[setup] METACOG_EXTRAS names an unknown extra {name!r}; pyproject.toml has {sorted(extras)}")
    if name in seen:
        return
    seen.add(name)
    for req in extras[name]:
        m = self_ref.match(req.replace(" ", ""))
        if m:
            for sub in m.group(1).split(","):
                add(sub)
        elif req not in reqs:
            reqs.append(req)


for name in os.environ["METACOG_EXTRAS"].split():
    add(name)
print("\n".join(reqs))
EOF
  )
  mapfile -t deps <<<"$deps_txt"
  # llama.cpp compiles for this CPU (-march=native), AMX included where the CPU reports it. On a
  # Sapphire Rapids virtual machine here, ggml's AMX matmul died with SIGILL (tilezero in an OpenMP
  # worker) on the first decode, so AMX is compiled out; AVX-512 with VNNI and BF16 stays.
  # CMAKE_ARGS reaches every CMake-built dependency (not the project); the flags only remove AMX.
  deps_cmake_args=${CMAKE_ARGS:-}
  if [ "$(uname -m)" = x86_64 ] && echo 'int x;' | "${CC:-cc}" -mno-amx-tile -x c -c - -o /dev/null 2>/dev/null; then
    noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    deps_cmake_args="$deps_cmake_args -DCMAKE_C_FLAGS='$noamx' -DCMAKE_CXX_FLAGS='$noamx'"
  fi
  CMAKE_ARGS="$deps_cmake_args" python -m pip install "${deps[@]}"
  python -m pip install --no-build-isolation --no-deps -e .
  echo "$src_hash" > "$stamp"
else
  echo "[setup] metacog_fast already built and up to date"
fi

# ALFWorld games (json_2.1.1: train / valid_seen / valid_train) from ../shared/data.
DATA_DIR=${ALFWORLD_DATA:-$ROOT/data/alfworld}
SHARED=${METACOG_SHARED:-$ROOT/../shared}
TARBALL="$SHARED/data/alfworld/json_2.1.1-dev.tar.xz"
if [ ! -d "$DATA_DIR/json_2.1.1" ]; then
  if [ -f "$TARBALL" ]; then
    echo "[setup] unpacking ALFWorld games into $DATA_DIR"
    mkdir -p "$DATA_DIR"
    tar -xJf "$TARBALL" -C "$DATA_DIR"
  else
    echo "[setup] ALFWorld games not found ($TARBALL missing). To get them: .venv/bin/alfworld-download"
    echo "        (the alfworld package's own download command; it needs internet and writes ~/.cache/alfworld,"
    echo "        which the package finds by itself), or set ALFWORLD_DATA to a folder holding json_2.1.1/."
    echo "        Until then \`metacog demo\` skips the ALFWorld parts and \`metacog info\` says why."
  fi
fi

if ! command -v java >/dev/null 2>&1; then
  echo "[setup] Java not found: ScienceWorld needs Java >= 8 (apt-get install -y default-jre-headless)"
fi
echo "[setup] done"
