#!/usr/bin/env bash
# Build llama.cpp's llama-bench, llama-batched-bench and llama-quantize (CPU only) from the llama.cpp sources that the
# llama-cpp-python sdist on PyPI vendors, and unpack its gguf-py next to them for convert_hf_to_gguf.py.
# Used by benchmarks/bench_llamacpp.py; nothing of llama.cpp is committed.
#
#   scripts/build_llamacpp.sh DIR [VERSION]
#
# DIR gets: src/ (the unpacked sdist), build/bin/llama-bench, build/bin/llama-batched-bench, build/bin/llama-quantize,
# and llama.cpp -> the vendored tree (convert_hf_to_gguf.py, gguf-py/).
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 DIR [llama-cpp-python VERSION]" >&2
    exit 2
fi
DIR=$(mkdir -p "$1" && cd "$1" && pwd)
VERSION=${2:-}
JOBS=${JOBS:-2}
SPEC=llama-cpp-python${VERSION:+==$VERSION}

cd "$DIR"
if ! ls llama_cpp_python-*.tar.gz >/dev/null 2>&1; then
    # The sdist only: its vendor/llama.cpp is the source we build. --no-binary names the package rather
    # than :all:, which would also build pip's metadata step's build requirements (cmake itself) from source.
    python -m pip download --no-deps --no-binary llama-cpp-python --dest "$DIR" "$SPEC"
fi
SDIST=$(ls llama_cpp_python-*.tar.gz | sort -V | tail -n 1)
rm -rf src && mkdir src
tar -xzf "$SDIST" -C src --strip-components=1
LLAMA="$DIR/src/vendor/llama.cpp"
if [ ! -f "$LLAMA/CMakeLists.txt" ]; then
    echo "error: $SDIST has no vendor/llama.cpp/CMakeLists.txt; pick another VERSION" >&2
    exit 1
fi
ln -sfn "$LLAMA" "$DIR/llama.cpp"

# -march=native turns AMX on where the CPU has it, but AMX tiles need the kernel's permission
# (arch_prctl), which a VM may not grant: llama-bench on q8_0 then dies of SIGILL. No AMX here.
EXTRA_FLAGS=""
case "$(uname -m)" in x86_64) EXTRA_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" ;; esac
cmake -S "$LLAMA" -B "$DIR/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DCMAKE_C_FLAGS="$EXTRA_FLAGS" -DCMAKE_CXX_FLAGS="$EXTRA_FLAGS" \
    -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
    -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF
cmake --build "$DIR/build" --config Release -j "$JOBS" --target llama-bench llama-batched-bench llama-quantize

# convert_hf_to_gguf.py imports `gguf` from gguf-py; the benchmark puts this dir on PYTHONPATH
# rather than installing it over whatever gguf the venv may have.
test -f "$LLAMA/gguf-py/gguf/__init__.py"
echo "llama-cpp-python: $SDIST"
echo "llama-bench:         $DIR/build/bin/llama-bench"
echo "llama-batched-bench: $DIR/build/bin/llama-batched-bench"
echo "llama-quantize:      $DIR/build/bin/llama-quantize"
echo "convert:             $LLAMA/convert_hf_to_gguf.py (PYTHONPATH=$LLAMA/gguf-py)"
