"""fp16 overflow (C37): the simulator reproduces the cascade on crafted inputs with the fixes off, and
the fixes prevent it; non-finite gradients skip the step and halve the loss scale; NaN is never
rewritten into a number."""

from __future__ import annotations

import warnings

import numpy as np

import orion
from train_helpers import lively_params, micro_config, token_stream
from orion.train.data import TokenDataset
from orion.train.programs import build_graph, layer_weights
from orion.train.stability import FP16_MAX, StabilityStats, count_norm_overflow, to_device_activation
from orion.train.trainer import TrainConfig, Trainer


def _run(cfg, p, kind, fixes, **inputs):
    prog = orion.compile(build_graph(kind, cfg, cfg.n_ctx, layer_weights(kind, p, 0), fixes=fixes), device="sim")
    try:
        return prog.run(inputs)
    finally:
        prog.release()


def _ref_attention_out(cfg, p, x, clamp=None):
    """float64 attention output 'att' of layer 0 for x [d, S] (token-major reference)."""
    import np_reference as R
    P = {k: R.T(v) for k, v in p.items()}
    xt = R.T(x.T)
    xn = R.rmsnorm(xt, P["layers.0.rms_att"], cfg.norm_eps)
    q = R.rope(R.matmul(xn, R.transpose(P["layers.0.wq"], (1, 0))), cfg.n_heads, cfg.rope_theta)
    k = R.rope(R.matmul(xn, R.transpose(P["layers.0.wk"], (1, 0))), cfg.n_kv_heads, cfg.rope_theta)
    v = R.matmul(xn, R.transpose(P["layers.0.wv"], (1, 0)))
    return R.attention(q, k, v, cfg.n_heads, cfg.n_kv_heads, clamp).value.T


def test_score_overflow_cascade_and_clamp():
    """Large Q/K: Q·Kᵀ saturates to inf (C36/C37) → softmax NaN without the fix; with it, finite and equal
    to the float64 attention whose scores are clamped at ±SCORE_CLAMP (saturated rows may tie)."""
    cfg = micro_config()
    p = lively_params(cfg)
    eye = np.eye(cfg.d_model, dtype=np.float32)
    p["layers.0.wq"] = 90 * eye
    p["layers.0.wk"] = 90 * eye
    p["layers.0.rms_att"] = np.ones(cfg.d_model, np.float32)
    x = np.random.default_rng(0).standard_normal((1, cfg.d_model, 1, cfg.n_ctx)).astype(np.float32)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        off = _run(cfg, p, "attn_fwd", False, x=x)
    assert any("C36" in str(m.message) for m in w)
    assert np.isnan(off["att"]).any() and np.isnan(off["o"]).any(), "the simulator should reproduce the cascade"
    on = _run(cfg, p, "attn_fwd", True, x=x)
    assert np.isfinite(on["att"]).all() and np.isfinite(on["o"]).all()
    from orion.train.programs import SCORE_CLAMP
    ref = _ref_attention_out(cfg, p, x.reshape(cfg.d_model, cfg.n_ctx), SCORE_CLAMP)
    err = np.abs(on["att"].reshape(ref.shape) - ref)
    # scores near the clamp are fp16-quantized in steps of 2-4, so a few near-tied rows differ a little
    assert err.max() < 0.1 and np.mean(err < 2e-2) > 0.99
    from orion.train.stability import count_score_clamps
    assert count_score_clamps(on["q"].reshape(cfg.d_model, -1), on["k"].reshape(cfg.d_model, -1), 4, 4) > 0


def test_norm_overflow_is_silent_without_the_fix():
    """RMS of 400: the plain fp16 norm's sum of squares overflows and it returns zeros (no NaN to notice);
    the prescaled norm is right."""
    cfg = micro_config()
    p = lively_params(cfg)
    rng = np.random.default_rng(1)
    x = (400 * rng.standard_normal((1, cfg.d_model, 1, cfg.n_ctx))).astype(np.float32)
    want = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + cfg.norm_eps) \
        * p["layers.0.rms_ffn"].reshape(1, -1, 1, 1)
    off = _run(cfg, p, "ffn_fwd", False, x=x)["xn"]
    assert np.abs(off).max() == 0.0
    on = _run(cfg, p, "ffn_fwd", True, x=x)["xn"]
    np.testing.assert_allclose(on, want, rtol=5e-3, atol=5e-3)
    assert count_norm_overflow(x.reshape(cfg.d_model, -1)) == cfg.n_ctx


def test_training_step_cascade_off_vs_on():
    """A full step on a model whose layer-0 attention overflows: NaN loss with the fixes off (counted,
    step skipped, weights untouched), finite with the fixes on (clamps counted)."""
    cfg = micro_config()
    tokens = token_stream()
    losses = {}
    for fixes in (False, True):
        p = lively_params(cfg)
        p["layers.0.wq"] = 90 * np.eye(cfg.d_model, dtype=np.float32)
        p["layers.0.wk"] = 90 * np.eye(cfg.d_model, dtype=np.float32)
        before = {k: v.copy() for k, v in p.items()}
        tc = TrainConfig(steps=1, batch=1, lr=1e-3, warmup=0, device="sim", val_fraction=0.0, fixes=fixes)
        t = Trainer(cfg, tc, p, TokenDataset(tokens, cfg.n_ctx, cfg.vocab_size, 0.0, 0))
        res = t.train()
        t.close()
        losses[fixes] = (res.losses[0], res.stats, all(np.array_equal(p[k], before[k]) for k in p))
    loss, stats, unchanged = losses[False]
    assert not np.isfinite(loss) and stats["nonfinite_loss"] == 1 and stats["skipped_steps"] == 1 and unchanged
    loss, stats, unchanged = losses[True]
    assert np.isfinite(loss) and stats["skipped_steps"] == 0 and stats["score_clamps"] > 0 and not unchanged


def test_gradient_overflow_skips_the_step_and_halves_the_scale():
    cfg = micro_config()
    tokens = token_stream()
    p = lively_params(cfg)
    before = {k: v.copy() for k, v in p.items()}
    tc = TrainConfig(steps=3, batch=1, lr=1e-3, warmup=0, device="sim", val_fraction=0.0, loss_scale=2.0 ** 40)
    t = Trainer(cfg, tc, p, TokenDataset(tokens, cfg.n_ctx, cfg.vocab_size, 0.0, 0))
    res = t.train()
    t.close()
    assert [r.skipped for r in res.records] == [True, True, True]
    assert [r.scale for r in res.records] == [2.0 ** 40, 2.0 ** 39, 2.0 ** 38] and t.scaler.scale == 2.0 ** 37
    assert res.stats["grad_overflows"] == 3 and res.stats["skipped_steps"] == 3
    assert all(np.isfinite(r.loss) for r in res.records)           # the forward was fine
    assert all(np.array_equal(p[k], before[k]) for k in p) and t.opt.t == 0


def test_loss_scale_recovers_and_training_proceeds():
    cfg = micro_config()
    tokens = token_stream()
    tc = TrainConfig(steps=8, batch=1, lr=1e-3, warmup=0, device="sim", val_fraction=0.0, loss_scale=2.0 ** 22)
    t = Trainer(cfg, tc, lively_params(cfg), TokenDataset(tokens, cfg.n_ctx, cfg.vocab_size, 0.0, 0))
    res = t.train()
    t.close()
    skipped = [r.skipped for r in res.records]
    assert skipped[0] and not skipped[-1] and t.opt.t == skipped.count(False)
    assert res.stats["skipped_steps"] == skipped.count(True)


def test_nan_is_never_rewritten():
    stats = StabilityStats()
    x = np.array([[1.0, np.nan, 7e4, -1e5, np.inf]], np.float32)
    y = to_device_activation(x, stats)
    assert np.isnan(y[0, 1]) and y[0, 0] == 1.0
    assert y[0, 2] == FP16_MAX and y[0, 3] == -FP16_MAX and y[0, 4] == np.inf
    assert stats.boundary_clamps == 2
    from orion.train.optim import global_norm
    assert np.isnan(global_norm({"a": np.array([1.0, np.nan], np.float32)}))


def test_an_activation_within_fp16_goes_to_the_device_as_is():
    stats = StabilityStats()
    x = np.array([[FP16_MAX, -FP16_MAX, 0.0, 1.5]], np.float32)
    assert to_device_activation(x, stats) is x and stats.boundary_clamps == 0     # no copy, nothing counted
