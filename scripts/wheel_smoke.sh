#!/usr/bin/env bash
# Smoke test of an INSTALLED orion (a wheel, not the source tree), run from a scratch folder:
# `orion --version` names the installed distribution's version, then `orion info`, `orion demo` and a
# 20-step `orion train` on the bundled corpus. Used by scripts/test_wheel.sh (Linux, no compiler on
# PATH) and as cibuildwheel's test-command (pyproject.toml), so both check the same things.
#   scripts/wheel_smoke.sh            (the `python` and `orion` first on PATH are the ones tested)
set -euo pipefail
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"  # no source tree on sys.path: imports must come from site-packages
fail() { echo "wheel_smoke: FAILED: $*" >&2; exit 1; }

# Where orion is imported from, and the version its installed metadata carries.
read -r native dist_version < <(python -c "
import importlib.metadata as md, orion._native as n
print(n.__file__, md.version('orion-ane'))")
case "$native" in
  */site-packages/orion/_native*) ;;
  *) fail "orion._native comes from $native, not from an installed package" ;;
esac
pkg=$(dirname "$native")
for f in __init__.py _native.pyi py.typed train/corpus/stories.txt; do
  [ -f "$pkg/$f" ] || fail "the installed package lacks orion/$f"
done

echo "+ orion --version"
version=$(orion --version)
echo "$version"
[[ "$version" == "orion $dist_version ("* ]] || fail "orion --version does not start with 'orion $dist_version ('"
echo "+ orion info"
orion info
echo "+ orion demo"
demo=$(orion demo)
echo "$demo"
[[ "$demo" == *"-> OK"* ]] || fail "orion demo did not report OK"
echo "+ orion train --steps 20 --no-ckpt --sample-tokens 20"
train=$(orion train --steps 20 --no-ckpt --sample-tokens 20 2>&1)
echo "$train" | sed -n '/^trained /,$p'  # the summary and sample, not the progress bar
[[ "$train" == *"trained 20 steps"* ]] || fail "orion train did not finish 20 steps"
echo "wheel_smoke: passed (orion $dist_version from $pkg)"
