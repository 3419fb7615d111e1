"""Training gradients: every parameter's gradient from the device training step (programs.py + step.py, on
the simulator) against the float64 tape reference (np_reference.py, written from each LlamaConfig feature's
definition and itself checked against central differences here), for a plain Llama, grouped-query
attention, one model family feature at a time and all of Gemma 3's together, under both weight
strategies; plus directional finite differences of the device loss, microbatch accumulation, LoRA adapter
gradients on a feature model, and a residual stream beyond fp16.

fp16 tolerance: activations and device-side gradients are fp16 (relative rounding 2^-11 per op, a few
dozen ops deep), so each parameter's gradient must match to 1.5 % in relative L2 norm (measured ~0.3 %).
Each comparison also shows it can tell a gradient from every other same-shaped one and from its own
transpose (a swapped or misplaced gradient, e.g. q_norm <-> k_norm, or a transposed dW, fails by orders
of magnitude).
"""

from __future__ import annotations

import numpy as np
import pytest

import np_reference as R
from train_helpers import lively_params, micro_config
from orion import lora as L
from orion.train.model import param_shapes
from orion.train.programs import LayerPrograms
from orion.train.step import GradAccumulator, StepEngine, zero_grads

SCALE = 256.0
TOL = 1.5e-2
LLAMA3_ROPE = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}
GEMMA = dict(n_kv_heads=1, head_dim=32, qk_norm=True, sandwich_norms=True, mlp_act="gelu_tanh", embed_scale=8.0,
             attn_scale=24 ** -0.5, final_softcap=2.0, sliding_window=8, layer_types=["sliding", "full"],
             local_rope_theta=100.0, rope_theta=200000.0, rope_scaling={"type": "linear", "factor": 2.0})
# The model families' LlamaConfig features (test_one_definition.py runs the same list).
FEATURES = {
    "head_dim": dict(head_dim=32),                       # q_dim 128 != d 64
    "qkv_bias": dict(qkv_bias=True, n_kv_heads=2),
    "qk_norm": dict(qk_norm=True, head_dim=32, n_kv_heads=2),
    "sliding": dict(sliding_window=8, layer_types=["sliding", "full"], local_rope_theta=100.0),
    "rope_llama3": dict(rope_theta=500000.0, rope_scaling=LLAMA3_ROPE),
    "sandwich": dict(sandwich_norms=True),
    "gelu_tanh": dict(mlp_act="gelu_tanh"),
    "scales": dict(embed_scale=8.0, attn_scale=0.1),
    "softcap": dict(final_softcap=2.0),
    "gemma3": GEMMA,
}
# micro_config's plain Llama (4 heads, 64 positions) and its grouped-query variant; the features at 32 positions.
MODELS = {"llama": {}, "llama_gqa": {"n_kv_heads": 2}, **{k: {"seq_len": 32, **v} for k, v in FEATURES.items()}}
# Every model with shared dynamic programs; the baked per-layer programs (recompile) for a plain model and
# for Gemma 3's per-layer windows and RoPE.
DEVICE_CASES = [(m, "dynamic") for m in MODELS] + [("llama", "recompile"), ("gemma3", "recompile")]


def _cfg(model, **kw):
    return micro_config(**{**MODELS[model], **kw})


def _batch(cfg, B=2, seed=0):
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, cfg.vocab_size, (B, cfg.n_ctx + 1))
    return tok[:, :-1], tok[:, 1:]


def _engine(cfg, p, strategy="dynamic", lora=None):
    progs = LayerPrograms(cfg, cfg.n_ctx, p, strategy, "sim", lora=lora)
    return progs, StepEngine(cfg, progs, p, lora=lora)


def _close(progs, eng):
    eng.close()
    progs.release()


def _step(eng, params, X, Y):
    """One microbatch on the device: (mean loss, gradients unscaled)."""
    g = zero_grads(params)
    res = eng.microbatch(X, Y, g, SCALE / X.size)
    assert res.finite
    return res.loss_sum / res.n_tokens, {k: v / SCALE for k, v in g.items()}


def _device_grads(cfg, p, X, Y, strategy="dynamic", lora=None):
    progs, eng = _engine(cfg, p, strategy, lora)
    try:
        return _step(eng, lora.params() if lora is not None else p, X, Y)
    finally:
        _close(progs, eng)


def _compare(g, ref, tol=TOL):
    assert set(g) == set(ref)
    for name in ref:
        assert g[name].shape == ref[name].shape, name
        nrm = np.linalg.norm(ref[name])
        assert nrm > 0, f"{name}: the reference gradient is zero (test model too degenerate)"
        err = np.linalg.norm(g[name] - ref[name]) / nrm
        assert err < tol, f"{name}: relative gradient error {err:.3g}"
        for other in ref:                     # the test can tell this gradient from every same-shaped one
            if other != name and ref[other].shape == ref[name].shape:
                assert np.linalg.norm(ref[other] - ref[name]) / nrm > 0.3, (name, other)
        if ref[name].ndim == 2 and ref[name].shape[0] == ref[name].shape[1]:     # ... and from dWᵀ
            assert np.linalg.norm(ref[name].T - ref[name]) / nrm > 0.3, f"{name}: test cannot tell dW from dWᵀ"


@pytest.mark.parametrize("model", ["llama_gqa", "every_feature"])
def test_reference_matches_finite_differences(model):
    """The float64 reference against central differences: a plain grouped-query Llama, and every feature
    at once (biases, q/k norms, head_dim, windows, per-layer and scaled RoPE, sandwich norms, GeGLU,
    scales, soft-capping)."""
    small = {"dim": 16, "n_heads": 2, "hidden_dim": 24, "vocab_size": 11, "n_layers": 2}
    if model == "llama_gqa":
        cfg, per_param = micro_config(**small, n_kv_heads=1, seq_len=5), 3
    else:
        cfg, per_param = micro_config(**small, seq_len=6, **{**GEMMA, "head_dim": 6, "sliding_window": 3,
                                                              "qkv_bias": True}), 2
    p = {k: v.astype(np.float64) for k, v in lively_params(cfg, 3).items()}
    X, Y = _batch(cfg, B=2, seed=1)
    assert set(R.loss_and_grads(cfg, p, X, Y)[1]) == set(param_shapes(cfg))
    R.check_finite_differences(cfg, p, X, Y, per_param=per_param)


@pytest.mark.parametrize("model,strategy", DEVICE_CASES)
def test_every_parameter_gradient_matches_float64_reference(model, strategy):
    cfg = _cfg(model)
    p = lively_params(cfg)
    X, Y = _batch(cfg)
    loss, g = _device_grads(cfg, p, X, Y, strategy)
    ref_loss, ref = R.loss_and_grads(cfg, p, X, Y)
    assert abs(loss - ref_loss) < 2e-3 * ref_loss
    assert set(g) == set(param_shapes(cfg))
    _compare(g, ref)


def test_features_change_the_reference():
    """Each feature moves the float64 loss (so a device path that ignored it would fail the test above)."""
    X, Y = _batch(_cfg("head_dim"))
    for feature in FEATURES:
        if feature == "head_dim":
            continue
        cfg = _cfg(feature)
        p = lively_params(cfg)
        plain = {k: v for k, v in FEATURES[feature].items() if k in ("n_kv_heads", "head_dim")}
        base = micro_config(seq_len=32, **plain)
        pb = {k: v for k, v in p.items() if k in param_shapes(base)}
        assert abs(R.loss_only(cfg, p, X, Y) - R.loss_only(base, pb, X, Y)) > 1e-3, feature


def test_directional_finite_differences_of_the_device_loss():
    """d loss / d theta along the gradient and along the gradient restricted to a random half of the
    entries, measured on the fp16 device forward itself (large steps: fp16 noise in the loss is ~1e-4)."""
    cfg = _cfg("llama")
    p = lively_params(cfg)
    X, Y = _batch(cfg)
    progs, eng = _engine(cfg, p)
    rng = np.random.default_rng(5)

    def loss():
        eng.progs.update(p)
        s, n = eng.loss_only(X, Y)
        return s / n

    try:
        _, g = _step(eng, p, X, Y)
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
    finally:
        _close(progs, eng)


def test_accumulation_over_microbatches_equals_one_batch():
    """Two microbatches of one sequence into a GradAccumulator == one microbatch of two sequences."""
    cfg = _cfg("llama")
    p = lively_params(cfg)
    X, Y = _batch(cfg)
    progs, eng = _engine(cfg, p)
    try:
        _, whole = _step(eng, p, X, Y)
        acc = GradAccumulator(zero_grads(p))
        for rep in range(2):                     # a second step reuses the buffers: nothing may leak across
            acc.start()
            for b in range(2):
                assert eng.microbatch(X[b:b + 1], Y[b:b + 1], acc, SCALE / X.size).finite
            acc.finish()
            for name in whole:
                np.testing.assert_allclose(acc[name] / SCALE, whole[name], rtol=1e-4, atol=1e-7, err_msg=name)
    finally:
        _close(progs, eng)


def test_dynamic_programs_per_attention_variant():
    """Shared dynamic programs: one attention pair per (window, RoPE) variant, the FFN pair shared."""
    cfg = _cfg("gemma3")
    progs = LayerPrograms(cfg, cfg.n_ctx, lively_params(cfg), "dynamic", "sim")
    assert progs.n_programs == 6
    assert progs.program("attn_fwd", 0) is not progs.program("attn_fwd", 1)
    assert progs.program("ffn_fwd", 0) is progs.program("ffn_fwd", 1)
    progs.release()


@pytest.mark.parametrize("feature", ["gemma3", "qkv_bias"])
def test_lora_adapter_gradients_on_a_feature_model(feature):
    """dA = s Bᵀ dW, dB = s dW Aᵀ of the float64 reference's dW at the merged weights."""
    cfg = _cfg(feature)
    p = lively_params(cfg)
    ad = L.init_adapter(cfg, L.LoraConfig(r=4, alpha=8, targets="all-linear"), seed=1, b_std=0.05)
    X, Y = _batch(cfg)
    loss, g = _device_grads(cfg, p, X, Y, lora=ad)
    merged = L.merge({k: np.asarray(v, np.float64) for k, v in p.items()}, ad)
    ref_loss, gw = R.loss_and_grads(cfg, merged, X, Y)
    ref = R.adapter_grads(ad, gw)
    assert abs(loss - ref_loss) < 2e-3 * ref_loss
    assert set(g) == set(ref)
    for name in ref:
        err = np.linalg.norm(g[name] - ref[name]) / np.linalg.norm(ref[name])
        assert err < TOL, f"{name}: relative gradient error {err:.3g}"


def test_residual_stream_beyond_fp16_is_carried_scaled():
    """A stream peaking far beyond fp16 (bf16-trained models such as Gemma 3): the trainer's scale (a power
    of two from orion.models.fp16_safety) brings it inside the programs, whose input norms take eps·s² -
    the same math, no clamping; at scale 1 the boundary clamps it and the gradients are wrong, or a sublayer
    output overflows (a typed error). (Gradients
    at such a stream are ~1/|x| small: a loss scale of 2^18 keeps them clear of fp16's subnormals.)"""
    from orion.models.fp16_safety import Fp16RangeError, resolve_fp16_plan
    cfg = _cfg("scales", embed_scale=3e6)
    p = lively_params(cfg)
    X, Y = _batch(cfg)
    s = resolve_fp16_plan(cfg, p).scale
    assert s < 1 / 16
    ref_loss, ref = R.loss_and_grads(cfg, p, X, Y)
    for scale, ok in ((s, True), (1.0, False)):
        progs = LayerPrograms(cfg, cfg.n_ctx, p, "dynamic", "sim", residual_scale=scale)
        eng = StepEngine(cfg, progs, p)
        g = zero_grads(p)
        try:
            res = eng.microbatch(X, Y, g, 2 ** 18 / X.size)
        except Fp16RangeError as e:      # a sublayer output left fp16: never a silent NaN
            assert not ok and e.layer == 0
            continue
        finally:
            eng.close()
            progs.release()
        err = max(np.linalg.norm(g[k] / 2 ** 18 - ref[k]) / np.linalg.norm(ref[k]) for k in ref)
        if ok:
            assert res.finite and res.stats.boundary_clamps == 0
            assert abs(res.loss_sum / res.n_tokens - ref_loss) < 2e-3 * ref_loss
            assert err < TOL, err
        else:
            assert res.stats.boundary_clamps > 0 and not (res.finite and err < TOL)
