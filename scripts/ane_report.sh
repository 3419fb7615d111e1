#!/usr/bin/env bash
# What this Mac's Neural Engine says, kept as files for a bug report or a CI artifact (the macOS
# workflow runs it; so can anyone, with orion installed, from the repository root):
#   scripts/ane_report.sh [OUT_DIR]        (default: ane-report)
# Writes OUT_DIR/{version,info,devices,doctor,pytest-ane}.txt and OUT_DIR/summary.md: orion --version,
# orion info, orion doctor --devices, orion doctor, and `pytest -m ane -v -rsx tests/ane`.
# A machine that does not expose an ANE (CI runners are VMs that may not) is reported in the summary,
# not a failure: the hardware tests then skip and doctor checks the simulator. It fails when a command
# fails, or when a macOS arm64 build lacks the ANE backend.
set -uo pipefail  # not -e: every command runs, failures are collected (bash 3.2 compatible)
out=${1:-ane-report}
mkdir -p "$out"
status=0

run() {  # run NAME CMD...: output to OUT/NAME.txt and the console; a failure is remembered
  local name=$1 rc
  shift
  { echo "+ $*"; "$@"; } >"$out/$name.txt" 2>&1
  rc=$?
  last_rc=$rc
  cat "$out/$name.txt"
  echo "(exit status $rc)" | tee -a "$out/$name.txt"
  [ "$rc" = 0 ] || { echo "ane_report: '$*' failed" >&2; status=1; }
}

run version orion --version
run info orion info
run devices orion doctor --devices
ane=$(python -c "
import orion
ane = next((d for d in orion.devices() if d['name'] == 'ane'), None)
print('not compiled into this build' if ane is None else 'available' if ane['available'] else 'not available: ' + ane['reason'])
")
[ -n "$ane" ] || { ane="unknown (orion.devices() failed)"; status=1; }
if [ "$(uname -s)/$(uname -m)" = Darwin/arm64 ] && [ "$ane" = "not compiled into this build" ]; then
  echo "ane_report: this macOS arm64 build has no ANE backend (CMake's ORION_ANE should be on)" >&2
  status=1
fi
run doctor orion doctor
doctor_rc=$last_rc
run pytest-ane python -m pytest -m ane -v -rsx tests/ane

{
  echo "### ANE report ($(uname -s) $(uname -m))"
  echo
  echo "- $(head -n 2 "$out/version.txt" | tail -n 1)"
  echo "- ANE backend: $ane"
  echo "- pytest -m ane: $(grep -E '^=+ .*(passed|failed|skipped|error).* =+$' "$out/pytest-ane.txt" | tail -n 1 | sed -E 's/^=+ (.*) =+$/\1/')"
  echo "- orion doctor: exit status $doctor_rc (table in doctor.txt)"
  [ "$status" = 0 ] || echo "- **a command failed: see the files of this report**"
} >"$out/summary.md"
cat "$out/summary.md"
[ -z "${GITHUB_STEP_SUMMARY:-}" ] || cat "$out/summary.md" >>"$GITHUB_STEP_SUMMARY"
exit $status
