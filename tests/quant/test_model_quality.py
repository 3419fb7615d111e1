"""Quantized stories260K against its fp16 self, through the float64 reference forward pass.

The numbers are the ones ``orion quality`` will print; this pins that they order as bits do and stay
in the measured range (deterministic: fixed weights, greedy tokens, seeded k-means).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from orion.quant import dequantized_weights, quality_report, quantize_weights

STORIES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "stories260K.bin")


@pytest.fixture(scope="module")
def model():
    if not os.path.exists(STORIES):
        pytest.skip("stories260K.bin is not in /work/shared/data")
    from orion.models import reference
    from orion.models.loaders import read_llama2c
    ck = read_llama2c(STORIES)
    w16 = {k: v.astype(np.float16) for k, v in ck.weights.items()}
    ids = [1] + reference.greedy(ck.config, w16, [1], 48)
    return ck.config, w16, ids, reference.forward(ck.config, w16, ids)


def _report(model, scheme, **kw):
    from orion.models import reference
    cfg, w16, ids, ref = model
    q, sizes = quantize_weights(w16, scheme, **kw)
    test = reference.forward(cfg, dequantized_weights(w16, q), ids)
    return quality_report(ref[:-1], test[:-1], np.array(ids[1:])), sizes


def test_quality_follows_the_bits(model):
    # stories260K's d_ff = 172: LUT groups of 4 channels and int4 blocks of 4 inputs are what divides it
    r8, s8 = _report(model, "uint8")
    r6, s6 = _report(model, "lut6", lut_group_size=4)
    r4, s4 = _report(model, "lut4", lut_group_size=4)
    assert r8.kl_divergence < 0.05 and r8.top1_match >= 0.85 and r8.correlation > 0.99
    assert r8.kl_divergence < r6.kl_divergence < r4.kl_divergence
    assert r8.top1_match > r4.top1_match and r6.correlation > r4.correlation
    assert s4.quantized_bytes < s8.quantized_bytes
    assert abs(r8.perplexity_test / r8.perplexity_ref - 1) < 0.1

