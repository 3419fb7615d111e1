"""Logit quality metrics against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from orion.errors import QuantizationError
from orion.quant import kl_divergence, logit_correlation, perplexity, quality_report, top1_match


def test_kl_divergence_by_hand():
    ref = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]]))
    test = np.log(np.array([[0.25, 0.5, 0.25], [0.1, 0.2, 0.7]])) + 3.0  # a shift does not change softmax
    kl0 = 0.5 * math.log(0.5 / 0.25) + 0.25 * math.log(0.25 / 0.5)
    assert kl_divergence(ref, test) == pytest.approx(kl0 / 2, rel=1e-12)
    assert kl_divergence(ref, ref) == 0.0


def test_kl_divergence_of_fp16_logits_is_finite_and_positive():
    rng = np.random.default_rng(0)
    ref = (rng.standard_normal((6, 1000)) * 8).astype(np.float16)
    test = (ref.astype(np.float32) + rng.standard_normal(ref.shape) * 0.5).astype(np.float16)
    assert 0 < kl_divergence(ref, test) < 1


def test_correlation_and_top1():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((5, 40))
    assert logit_correlation(ref, 2 * ref + 1) == pytest.approx(1.0)
    assert logit_correlation(ref, -ref) == pytest.approx(-1.0)
    test = ref.copy()
    test[2, ref[2].argmin()] = ref[2].max() + 1  # position 2 now prefers another token
    assert top1_match(ref, test) == pytest.approx(0.8)
    assert top1_match(ref[None], test[None]) == pytest.approx(0.8)  # leading dims are positions


def test_perplexity():
    assert perplexity(np.zeros((4, 50)), [1, 2, 3, 4]) == pytest.approx(50.0)
    logits = np.log(np.array([[0.5, 0.5], [0.25, 0.75]]))
    assert perplexity(logits, np.array([0, 1])) == pytest.approx(math.exp(-(math.log(0.5) + math.log(0.75)) / 2))


def test_report():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((8, 30))
    r = quality_report(ref, ref, targets=rng.integers(0, 30, 8))
    assert r.positions == 8 and r.kl_divergence == 0 and r.top1_match == 1 and r.correlation == pytest.approx(1)
    assert r.perplexity_ref == r.perplexity_test and "top-1 match 100.0%" in str(r)
    assert quality_report(ref, ref).perplexity_test is None


@pytest.mark.parametrize("call,match", [
    (lambda: kl_divergence(np.zeros((2, 5)), np.zeros((3, 5))), "same shape"),
    (lambda: top1_match(np.zeros((2, 5), np.int32), np.zeros((2, 5))), "float array"),
    (lambda: kl_divergence(np.array([[0.0, np.inf]]), np.zeros((1, 2))), "position 0 are not finite"),
    (lambda: logit_correlation(np.ones((2, 3)), np.zeros((2, 3)) + np.arange(3)), "position 0 are constant"),
    (lambda: perplexity(np.zeros((2, 5)), [1, 5]), r"outside the vocabulary \[0, 5\)"),
    (lambda: perplexity(np.zeros((2, 5)), [1, 2, 3]), "2 integer token ids"),
    (lambda: perplexity(np.zeros((2, 5)), [1.0, 2.0]), "integer token ids"),
])
def test_bad_input_raises_quantization_error(call, match):
    with pytest.raises(QuantizationError, match=match):
        call()
