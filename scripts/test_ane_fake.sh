#!/usr/bin/env bash
# Off-device contract tests of the Objective-C++ ANE backend (src/orion_native/ane):
#   1. installs clang + GNUstep (Debian: clang libgnustep-base-dev gnustep-make) when missing;
#   2. builds orion._native with -DORION_ANE_FAKE=ON in its own build folder: the same .mm sources as
#      on macOS, compiled with clang against GNUstep's GCC Objective-C runtime, an IOSurface shim and a
#      fake AppleNeuralEngine (tests/ane_fake) that forwards to the simulator and checks every call;
#   3. runs tests/runtime and tests/ane with device="ane" routed through the fake (ORION_TEST_DEVICE=ane,
#      tests/ane/ane_device_plugin.py), failing on any contract violation the fake logs;
#   4. checks that no ANE temp folder (nor owner marker) was left behind.
#
#   scripts/test_ane_fake.sh [BUILD_DIR] [extra pytest args...]      (default BUILD_DIR: build/ane-fake)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build/ane-fake}
shift || true
py=${PYTHON:-python3}
t0=$(date +%s)

missing=()
command -v clang >/dev/null 2>&1 || missing+=(clang)
command -v gnustep-config >/dev/null 2>&1 || missing+=(gnustep-make)
[ -f /usr/include/GNUstep/Foundation/Foundation.h ] || missing+=(libgnustep-base-dev)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test_ane_fake: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang libgnustep-base-dev gnustep-make >/dev/null
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${BUILD_TYPE:-Release} \
    -DPython_EXECUTABLE="$(command -v "$py")" -DORION_ANE_FAKE=ON \
    -DCMAKE_OBJC_COMPILER="$(command -v clang)" -DCMAKE_OBJCXX_COMPILER="$(command -v clang++)" >/dev/null
fi
cmake --build "$build" --target _native -j "${JOBS:-2}"
t1=$(date +%s)

# The run's ANE temp folders (GNUstep's NSTemporaryDirectory() follows TEMP) go to a private folder.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export TEMP="$scratch" TMP="$scratch"
export ORION_ANE_FRAMEWORK_PATH="$build/ane_fake/libAppleNeuralEngine.so"
export ORION_TEST_DEVICE=ane ORION_ANE_HW_ON_FAKE=1 ORION_CACHE_DIR="$scratch/cache"
cd "$here"
PYTHONPATH="$here/python:$build:$here/tests${PYTHONPATH:+:$PYTHONPATH}" \
  "$py" -m pytest -q -p ane.ane_device_plugin tests/runtime tests/ane "$@"

# Folders of upstream shape, plus any folder an owner marker still names (identifiers of other shapes).
left=$(find "$scratch" -maxdepth 1 -regextype posix-extended -regex '.*/[0-9A-F]{64}_[0-9A-F]{64}_[0-9A-F]{64}' | wc -l)
if [ -d "$scratch/orion-ane-owners" ]; then
  left=$((left + $(find "$scratch/orion-ane-owners" -type f | wc -l)))
fi
if [ "$left" != 0 ]; then
  echo "test_ane_fake: FAILED: $left ANE temp folder(s) left in $scratch" >&2
  exit 1
fi
t2=$(date +%s)
echo "test_ane_fake: passed (build $((t1 - t0)) s, tests $((t2 - t1)) s, total $((t2 - t0)) s)"
