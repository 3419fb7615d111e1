"""Training gradients of every LlamaConfig feature the model families use: the device step
(programs.py + step.py) against the float64 tape reference (np_reference.py, written from the features'
definitions and itself checked against finite differences here), one feature at a time and all of
Gemma 3's together, plus LoRA adapter gradients on a feature model.

Tolerance as in test_gradients.py: 1.5 % relative L2 per parameter (fp16 device activations). Each test
also shows it can tell a parameter's gradient from any other same-shaped one's (a swapped or misplaced
gradient, e.g. q_norm <-> k_norm or rms_att_post <-> rms_ffn_post, fails).
"""

from __future__ import annotations

import numpy as np
import pytest

import np_reference as R
from train_helpers import lively_params, micro_config
from orion import lora as L
from orion.train.model import param_shapes
from orion.train.programs import LayerPrograms
from orion.train.step import StepEngine, zero_grads

SCALE = 256.0
LLAMA3_ROPE = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}
GEMMA = dict(n_kv_heads=1, head_dim=32, qk_norm=True, sandwich_norms=True, mlp_act="gelu_tanh", embed_scale=8.0,
             attn_scale=24 ** -0.5, final_softcap=2.0, sliding_window=8, layer_types=["sliding", "full"],
             local_rope_theta=100.0, rope_theta=200000.0, rope_scaling={"type": "linear", "factor": 2.0})
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


def _cfg(feature, **kw):
    return micro_config(seq_len=32, **{**FEATURES[feature], **kw})


def _batch(cfg, B=2, seed=0):
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, cfg.vocab_size, (B, cfg.n_ctx + 1))
    return tok[:, :-1], tok[:, 1:]


def _device_grads(cfg, p, X, Y, strategy="dynamic", lora=None):
    progs = LayerPrograms(cfg, cfg.n_ctx, p, strategy, "sim", lora=lora)
    eng = StepEngine(cfg, progs, p, lora=lora)
    g = zero_grads(lora.params() if lora is not None else p)
    res = eng.microbatch(X, Y, g, SCALE / X.size)
    eng.close()
    progs.release()
    assert res.finite
    return res.loss_sum / res.n_tokens, {k: v / SCALE for k, v in g.items()}


def _compare(g, ref, tol=1.5e-2):
    for name in ref:
        assert g[name].shape == ref[name].shape, name
        nrm = np.linalg.norm(ref[name])
        assert nrm > 0, f"{name}: the reference gradient is zero (test model too degenerate)"
        err = np.linalg.norm(g[name] - ref[name]) / nrm
        assert err < tol, f"{name}: relative gradient error {err:.3g}"
        for other in ref:                     # the test can tell this gradient from every same-shaped one
            if other != name and ref[other].shape == ref[name].shape:
                assert np.linalg.norm(ref[other] - ref[name]) / nrm > 0.3, (name, other)


def test_feature_reference_matches_finite_differences():
    """The float64 reference with every feature at once (biases, q/k norms, head_dim, windows, per-layer
    and scaled RoPE, sandwich norms, GeGLU, scales, soft-capping) against central differences."""
    cfg = micro_config(dim=16, n_heads=2, hidden_dim=24, vocab_size=11, seq_len=6, n_layers=2,
                       **{**GEMMA, "head_dim": 6, "sliding_window": 3, "qkv_bias": True})
    p = {k: v.astype(np.float64) for k, v in lively_params(cfg, 3).items()}
    X, Y = _batch(cfg, B=2, seed=1)
    assert set(R.loss_and_grads(cfg, p, X, Y)[1]) == set(param_shapes(cfg))
    R.check_finite_differences(cfg, p, X, Y, per_param=2)


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_every_parameter_gradient_of_a_feature_model(feature):
    cfg = _cfg(feature)
    p = lively_params(cfg)
    X, Y = _batch(cfg)
    loss, g = _device_grads(cfg, p, X, Y)
    ref_loss, ref = R.loss_and_grads(cfg, p, X, Y)
    assert abs(loss - ref_loss) < 2e-3 * ref_loss
    assert set(g) == set(ref) == set(param_shapes(cfg))
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


def test_gemma_layer_variants_under_recompile():
    """Baked per-layer programs (recompile strategy) take each layer's own window and RoPE too."""
    cfg = _cfg("gemma3")
    p = lively_params(cfg)
    X, Y = _batch(cfg)
    _, g = _device_grads(cfg, p, X, Y, strategy="recompile")
    _compare(g, R.loss_and_grads(cfg, p, X, Y)[1])


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
        assert err < 1.5e-2, f"{name}: relative gradient error {err:.3g}"


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
            assert err < 1.5e-2, err
        else:
            assert res.stats.boundary_clamps > 0 and not (res.finite and err < 1.5e-2)
