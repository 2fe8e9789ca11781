#!/usr/bin/env bash
# Fast developer rebuild of the compiled core into a build folder of your own,
# without reinstalling the package:
#   scripts/dev_build.sh /tmp/build_me            # cpu
#   METACOG_BACKEND=cuda scripts/dev_build.sh /tmp/build_cuda
#   export METACOG_CORE_PATH=/tmp/build_me        # metacog_fast then loads that _core
# (The alternative loop is `pip install --no-build-isolation -Ceditable.rebuild=true -e .`,
# which rebuilds on import.)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/dev}
PY=${PYTHON:-$(command -v python)}
PYBIND11_DIR=$("$PY" -c "import pybind11; print(pybind11.get_cmake_dir())")
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PY" -Dpybind11_DIR="$PYBIND11_DIR" \
  -DMETACOG_BACKEND="${METACOG_BACKEND:-cpu}" -DCUDA_ARCHITECTURES="${METACOG_CUDA_ARCHITECTURES:-90}" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
echo "export METACOG_CORE_PATH=$(cd "$BUILD" && pwd)"
