"""Gradient of every parameter from the device training step vs a float64 numpy reference (itself
checked against finite differences), plus directional finite differences of the device loss.

fp16 tolerance: activations and device-side gradients are fp16 (relative rounding 2^-11 per op, a few
dozen ops deep), so each parameter's gradient must match to 1.5 % in relative L2 norm (measured ~0.3 %).
A transposed dW (square matrices: error ~1.4) or two swapped outputs fail by orders of magnitude.
"""

from __future__ import annotations

import numpy as np
import pytest

import np_reference as R
from train_helpers import lively_params, micro_config
from orion.train.model import param_shapes
from orion.train.programs import LayerPrograms
from orion.train.step import StepEngine, zero_grads

SCALE = 256.0


def _batch(cfg, B=2, seed=0):
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, cfg.vocab_size, (B, cfg.n_ctx + 1))
    return tok[:, :-1], tok[:, 1:]


def _our_grads(cfg, p, X, Y, strategy="dynamic"):
    progs = LayerPrograms(cfg, cfg.n_ctx, p, strategy, "sim")
    eng = StepEngine(cfg, progs, p)
    g = zero_grads(p)
    res = eng.microbatch(X, Y, g, SCALE / X.size)
    assert res.finite
    return res.loss_sum / res.n_tokens, {k: v / SCALE for k, v in g.items()}, eng


def test_reference_matches_finite_differences():
    cfg = micro_config(dim=16, n_heads=2, n_kv_heads=1, hidden_dim=24, vocab_size=11, seq_len=5, n_layers=2)
    p = {k: v.astype(np.float64) for k, v in lively_params(cfg, 3).items()}
    X, Y = _batch(cfg, B=2, seed=1)
    R.check_finite_differences(cfg, p, X, Y)


@pytest.mark.parametrize("kv_heads,strategy", [(4, "dynamic"), (2, "dynamic"), (4, "recompile")])
def test_every_parameter_gradient_matches_float64_reference(kv_heads, strategy):
    cfg = micro_config(n_kv_heads=kv_heads)
    p = lively_params(cfg)
    X, Y = _batch(cfg)
    loss, g, _ = _our_grads(cfg, p, X, Y, strategy)
    ref_loss, ref = R.loss_and_grads(cfg, p, X, Y)
    assert abs(loss - ref_loss) < 2e-3 * ref_loss
    assert set(g) == set(ref) == set(param_shapes(cfg))
    for name in ref:
        assert g[name].shape == ref[name].shape, name
        nrm = np.linalg.norm(ref[name])
        assert nrm > 0, f"{name}: the reference gradient is zero (test model too degenerate)"
        err = np.linalg.norm(g[name] - ref[name]) / nrm
        assert err < 1.5e-2, f"{name}: relative gradient error {err:.3g}"
        if g[name].ndim == 2 and g[name].shape[0] == g[name].shape[1]:
            assert np.linalg.norm(g[name].T - ref[name]) / nrm > 0.3, f"{name}: test cannot tell dW from dW^T"


def test_directional_finite_differences_of_the_device_loss():
    """d loss / d theta along the gradient and along the gradient restricted to a random half of the
    entries, measured on the fp16 device forward itself (large steps: fp16 noise in the loss is ~1e-4)."""
    cfg = micro_config()
    p = lively_params(cfg)
    X, Y = _batch(cfg)
    _, g, eng = _our_grads(cfg, p, X, Y)
    rng = np.random.default_rng(5)

    def loss():
        eng.progs.update(p)
        s, n = eng.loss_only(X, Y)
        return s / n

    for name in ("layers.0.wq", "layers.1.w2", "layers.0.rms_att", "tok_emb", "layers.1.wv"):
        for kind in ("grad", "subset"):
            d = g[name] if kind == "grad" else g[name] * (rng.random(g[name].shape) < 0.5)
            d = d / np.linalg.norm(d)
            want = float(np.sum(g[name] * d))
            eps = 0.02 * max(1.0, float(np.linalg.norm(p[name])) / 4)
            old = p[name].copy()
            p[name][...] = old + eps * d
            lp = loss()
            p[name][...] = old - eps * d
            lm = loss()
            p[name][...] = old
            fd = (lp - lm) / (2 * eps)
            assert abs(fd - want) <= 2e-3 + 0.08 * abs(want), (name, kind, fd, want)
    eng.progs.update(p)


def test_accumulation_over_microbatches_equals_one_batch():
    """Two microbatches of one sequence into a GradAccumulator == one microbatch of two sequences."""
    from orion.train.step import GradAccumulator
    cfg = micro_config()
    p = lively_params(cfg)
    X, Y = _batch(cfg)
    _, whole, eng = _our_grads(cfg, p, X, Y)
    acc = GradAccumulator(zero_grads(p))
    for rep in range(2):                     # a second step reuses the buffers: nothing may leak across
        acc.start()
        for b in range(2):
            assert eng.microbatch(X[b:b + 1], Y[b:b + 1], acc, SCALE / X.size).finite
        acc.finish()
        for name in whole:
            np.testing.assert_allclose(acc[name] / SCALE, whole[name], rtol=1e-4, atol=1e-7, err_msg=name)
