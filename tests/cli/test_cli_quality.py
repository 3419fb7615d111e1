"""``orion quality`` prints KL, logit correlation, top-1 match and perplexity of a quantized model against
its fp16 self on a text, plus the weight bytes of both; ``orion generate --quantize`` runs the compressed
model. Model: the committed llama3 fixture (d=32, 2 layers, tokenizer.json)."""

from __future__ import annotations

import os
import re

import pytest

from orion.cli import main

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")


def _number(text: str, label: str) -> float:
    return float(re.search(rf"{label}\s+([0-9.]+)", text).group(1))


def test_quality_int8_vs_lut4(capsys, tmp_path):
    data = tmp_path / "t.txt"
    data.write_text("Once upon a time there was a little girl who liked to play in the park with her dog. " * 8)
    res = {}
    for q in ("int8", "lut4"):
        assert main(["quality", "--model", FIXTURE, "--quantize", q, "--device", "sim", "--data", str(data),
                     "--tokens", "80"]) == 0
        out = capsys.readouterr().out
        assert f"{q} vs fp16 over 79 positions of {data}" in out and "perplexity" in out
        res[q] = {k: _number(out, k) for k in ("KL divergence", "logit correlation", "top-1 match")}
        ratio = float(re.search(r"fp16 \(([0-9.]+)%\)", out).group(1))
        assert ratio < (70 if q == "int8" else 40)           # weight bytes in the programs vs fp16
    # more bits, closer to fp16 (the fixture's measured numbers: int8 KL < 0.01, top-1 > 90%)
    assert res["int8"]["KL divergence"] < res["lut4"]["KL divergence"]
    assert res["int8"]["logit correlation"] > res["lut4"]["logit correlation"]
    assert res["int8"]["top-1 match"] >= 90


def test_quality_needs_a_known_scheme(capsys):
    with pytest.raises(SystemExit) as e:
        main(["quality", "--model", FIXTURE, "--quantize", "lut5", "--device", "sim"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_generate_quantized(capsys):
    assert main(["generate", "--model", FIXTURE, "--quantize", "int4", "--device", "sim", "--prompt", "Once",
                 "-m", "5"]) == 0
    assert "5 generated" in capsys.readouterr().err
