"""A short fixed-seed run of the two tokenizer-input fuzzers (fuzz/fuzz_chat_template.py and
fuzz/fuzz_tokenizer_files.py): a few seconds each, no crash, hang, memory blow-up, divergence
from jinja, changed file or wrong type accepted. Longer runs: the scripts' --seconds / --seed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("jinja2")

FUZZ = os.path.join(os.path.dirname(__file__), "..", "..", "fuzz")


@pytest.mark.parametrize("script,findings", [
    ("fuzz_chat_template.py", ("crashes", "hangs", "memory", "divergences")),
    ("fuzz_tokenizer_files.py", ("crashes", "hangs", "changed", "accepted")),
])
def test_fuzzer_finds_nothing_in_a_short_run(script, findings):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    r = subprocess.run([sys.executable, os.path.join(FUZZ, script), "--seconds", "4", "--seed", "28"],
                       capture_output=True, text=True, timeout=120, env=env, check=False)
    counts = json.loads(r.stdout.strip().splitlines()[-1])
    assert r.returncode == 0 and all(counts[k] == 0 for k in findings), (counts, r.stderr[-3000:])
    assert counts["cases"] >= 50 and counts["typed_errors"] > 0            # it ran, and hit the error paths
    assert counts.get("rendered", counts.get("loaded", 0)) > 0             # and the paths that succeed
