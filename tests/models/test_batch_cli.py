"""``orion generate --prompts-file``: every line generated as one batch; each output equals the prompt
generated alone; per-stream and aggregate tok/s on stderr; bad files are InputErrors naming the line."""

from __future__ import annotations

import argparse
import io
import os

import pytest

from orion.errors import InputError
from orion.models import load

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")


def _cli(argv):
    from orion.cli.generate import add_generate_parser, cmd_generate
    p = argparse.ArgumentParser()
    add_generate_parser(p.add_subparsers())
    args = p.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    assert cmd_generate(args, out=out, err=err) == 0
    return out.getvalue(), err.getvalue()


def test_prompts_file_batch_equals_each_prompt_alone(tmp_path):
    lines = ["Once upon a time", "", "The cat", "A long, long prompt with several words in it"]
    f = tmp_path / "prompts.txt"
    f.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out, err = _cli(["generate", "--model", FIXTURE, "--prompts-file", str(f), "--batch", "2", "--max-tokens", "6",
                     "--device", "sim", "--cache-dir", str(tmp_path / "c"), "--stop-token", "-1"])
    m = load(FIXTURE, device="sim", cache=str(tmp_path / "c"))
    want = "".join(f"--- [{i}] ---\n{p}{m.generate(p, max_tokens=6, stop_tokens=[-1]).text}\n"
                   for i, p in enumerate(x for x in lines if x))
    assert out == want
    assert err.count("(decode per stream)") == 3 and "tok/s aggregate" in err and "3 sequences, batch 2" in err


def test_prompts_file_errors(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        _cli(["generate", "--model", FIXTURE, "--prompts-file", str(tmp_path / "nope.txt"), "--device", "sim",
              "--cache-dir", str(tmp_path / "c")])
    (tmp_path / "empty.txt").write_text("\n\n", encoding="utf-8")
    with pytest.raises(InputError, match="holds no prompt"):
        _cli(["generate", "--model", FIXTURE, "--prompts-file", str(tmp_path / "empty.txt"), "--device", "sim",
              "--cache-dir", str(tmp_path / "c")])
