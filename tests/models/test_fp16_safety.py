"""fp16 safety is part of loading: a residual stream beyond ±65,504 (bf16-trained models, Gemma 3 notably)
overflows in the programs exactly as on the ANE; the residual-stream scaling chosen at load keeps the
same math inside fp16.

The model is the gemma3 fixture with its post-FFN norm weights amplified so that the residual
stream peaks far above fp16's range (the weights themselves stay representable)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from orion.errors import InputError
from orion.models import Model, reference
from orion.models.fp16_safety import FP16_MAX, Fp16Plan, Fp16RangeError, resolve_fp16_plan, stream_peaks
from orion.models.loaders import read_checkpoint

FIXTURE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "gemma3")


@pytest.fixture(scope="module")
def hot():
    ck = read_checkpoint(FIXTURE)
    w = {k: np.asarray(v, np.float32) for k, v in ck.weights.items()}
    last = ck.config.n_layers - 1
    for layer in range(ck.config.n_layers):        # each layer adds up to ~|w| * sqrt(d) to the stream
        w[f"layers.{layer}.rms_ffn_post"] = w[f"layers.{layer}.rms_ffn_post"] * np.float32(20000.0)
    assert max(np.abs(a).max() for a in w.values()) < FP16_MAX
    ids = np.load(os.path.join(FIXTURE, "reference.npz"))["ids"][:24].tolist()
    return ck.config, w, ids


def test_the_probe_sees_the_overflow(hot):
    cfg, w, _ = hot
    assert stream_peaks(cfg, w)[0] > 1.5 * FP16_MAX
    plan = resolve_fp16_plan(cfg, w, "auto")
    assert plan.scale < 1 and np.log2(plan.scale) == int(np.log2(plan.scale)) and plan.stable_norms
    ck = read_checkpoint(FIXTURE)
    assert resolve_fp16_plan(ck.config, ck.weights, "auto") == Fp16Plan()   # a normal model is left alone


def _rel_err(cfg, w, ids, scale):
    m = Model(cfg, {k: v.astype(np.float16) for k, v in w.items()}, device="sim", residual_scale=scale)
    try:
        z = m.logits(ids)
    finally:
        m.release()
    want = reference.forward(cfg, {k: v.astype(np.float16) for k, v in w.items()}, ids)
    with np.errstate(invalid="ignore"):
        return float(np.nan_to_num(np.abs(z - want).max(), nan=np.inf) / np.abs(want).max())


def test_overflow_without_the_scaling_is_a_typed_error_and_a_match_with_it(hot):
    cfg, w, ids = hot
    with pytest.raises(Fp16RangeError, match=r"layer \d+: .*residual_scale=") as e:
        _rel_err(cfg, w, ids, 1.0)                   # the simulator reproduces the overflow; never silent
    assert e.value.layer is not None and e.value.scale == 1.0
    assert _rel_err(cfg, w, ids, "auto") < 0.05      # scaled residual stream: the float64 answer


def test_residual_scale_argument_is_checked(hot):
    cfg, w, _ = hot
    for bad in (0, -1.0, float("nan"), "big", True):
        with pytest.raises(InputError):
            resolve_fp16_plan(cfg, w, bad)
