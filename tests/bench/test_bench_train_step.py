"""The training-step benchmark's interleaved rounds (orion.bench.train_step): every side gets one step per
round, the warm-up round is marked, and the transformers side trains (its loss falls) in fp32 and under
bf16 autocast. A micro config, so the test runs in seconds."""

from __future__ import annotations

import re

import numpy as np
import pytest

from orion.bench.train_step import QUICK, interleaved_step_times, med, setup

pytest.importorskip("torch")
pytest.importorskip("transformers")


def test_rounds_interleave_every_side_with_a_warmup_round():
    cfg, params, tokens = setup(QUICK["preset"], QUICK["layers"], QUICK["seq"])
    order = []
    steps, info = interleaved_step_times(cfg, params, tokens, 2, ("orion", "hf_fp32", "hf_bf16"), torch_threads=1,
                                         log=order.append)
    assert set(steps) == {"orion", "hf_fp32", "hf_bf16"}
    rounds = [re.match(r"\s*round (\d+)(?: \(warmup\))? (\w+):", line).groups() for line in order]
    assert rounds == [(str(i), side) for i in range(3) for side in ("orion", "hf_fp32", "hf_bf16")]
    for side, recs in steps.items():
        assert [r["warmup"] for r in recs] == [True, False, False], side
        assert med(recs, "total") > 0
    assert info["torch_threads"] == 1
    hf = [r["loss"] for side in ("hf_fp32", "hf_bf16") for r in steps[side]]
    assert steps["hf_bf16"][-1]["loss"] < steps["hf_fp32"][0]["loss"]   # one model, trained by both sides
    assert np.isfinite(hf).all()


def test_profile_collects_our_last_steps_simulated_ops():
    cfg, params, tokens = setup(QUICK["preset"], QUICK["layers"], QUICK["seq"])
    prof = []
    interleaved_step_times(cfg, params, tokens, 1, ("orion",), profile=prof, log=lambda *a: None)
    assert len(prof) == 1
    ops = {a["op"] for a in prof[0].by_op()}
    assert "matmul" in ops and prof[0].seconds > 0
