#!/usr/bin/env bash
# Runs the test suite against orion._native built with AddressSanitizer + UBSan (gcc).
#   scripts/test_asan.sh [pytest args...]
# Python itself is not instrumented, so the ASan runtime is preloaded; leak checking is off because
# CPython keeps allocations alive at exit by design. Any ASan/UBSan report aborts the run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${ORION_ASAN_BUILD:-$here/build/asan}
BUILD_TYPE=RelWithDebInfo "$here/scripts/dev_build.sh" "$build" -DORION_SANITIZE=ON
asan=$(${CXX:-g++} -print-file-name=libasan.so)
ubsan=$(${CXX:-g++} -print-file-name=libubsan.so)
# libstdc++ is preloaded too: without it the first C++ exception aborts under the preloaded ASan runtime.
export LD_PRELOAD="$asan:$ubsan:$(${CXX:-g++} -print-file-name=libstdc++.so)"
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export PYTHONPATH="$here/python:$build"
cd "$here"
python3 -m pytest -q -p no:cacheprovider "$@"
