#!/usr/bin/env bash
# Incremental development build of orion._native without pip:
#   scripts/dev_build.sh [BUILD_DIR] [extra cmake args...]
#   PYTHONPATH=python:BUILD_DIR python -m pytest tests
# The module lands in BUILD_DIR/orion/; orion/__init__.py extends its package path to find it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build/dev}
shift || true
py=${PYTHON:-python3}
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} \
    -DPython_EXECUTABLE="$(command -v "$py")" "$@" >/dev/null
fi
cmake --build "$build" --target _native -j "${JOBS:-2}"
