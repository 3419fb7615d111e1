"""quantize_weights on orion's canonical weight names: what is quantized, the byte report, determinism."""

from __future__ import annotations

import numpy as np
import pytest

from orion.errors import QuantizationError
from orion.models.config import GPT2Config, LlamaConfig
from orion.models.loaders import expected_shapes
from orion.quant import (SCHEMES, AffineQuantized, BlockwiseQuantized, LutQuantized, QuantizedTensor,
                         dequantized_weights, quantize_weights)

LINEAR = {"wq", "wk", "wv", "wo", "w1", "w2", "w3", "wcls"}


def _weights(cfg, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) * 0.02).astype(np.float32) for k, s in expected_shapes(cfg).items()}


def _llama():
    return LlamaConfig(vocab_size=512, n_ctx=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=128,
                       qkv_bias=True, qk_norm=True)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
def test_only_linear_weights_are_quantized(scheme):
    w = _weights(_llama())
    q, report = quantize_weights(w, scheme)
    assert {k.rsplit(".", 1)[-1] for k in q} == LINEAR and len(q) == 7 * 2 + 1
    assert set(report.kept) == set(w) - set(q)  # norms, biases, q/k norms, tok_emb
    assert "tok_emb" in report.kept and not any(k.endswith(("rms_att", "bq", "q_norm")) for k in q)
    kind = {"int8": AffineQuantized, "uint8": AffineQuantized, "lut4": LutQuantized, "lut6": LutQuantized,
            "int4": BlockwiseQuantized, "uint4": BlockwiseQuantized}[scheme]
    for name, t in q.items():
        assert isinstance(t, kind) and isinstance(t, QuantizedTensor) and t.shape == w[name].shape
        assert t.op == {AffineQuantized: "constexpr_affine_dequantize", LutQuantized: "constexpr_lut_to_dense",
                        BlockwiseQuantized: "constexpr_blockwise_shift_scale"}[kind]
    assert report.fp16_bytes == sum(a.size for a in w.values()) * 2
    assert report.quantized_bytes == sum(t.nbytes for t in q.values()) + sum(w[k].size * 2 for k in report.kept)
    assert report.tensors["layers.0.wq"] == (64 * 64 * 2, q["layers.0.wq"].nbytes)
    assert scheme in str(report)


def test_embeddings_on_request_and_byte_ratios():
    w = _weights(_llama())
    ratios = {}
    for scheme in ("int8", "lut4", "int4"):
        q, report = quantize_weights(w, scheme, include_embeddings=True)
        assert "tok_emb" in q
        quantized_fp16 = sum(n for n, _ in report.tensors.values())
        ratios[scheme] = sum(c for _, c in report.tensors.values()) / quantized_fp16
    assert ratios["int8"] <= 0.55 and ratios["lut4"] <= 0.30 and ratios["int4"] <= 0.30


def test_gpt2_names():
    cfg = GPT2Config(vocab_size=256, n_ctx=32, d_model=32, n_layers=1, n_heads=2, d_ff=64)
    q, report = quantize_weights(_weights(cfg), "int8", include_embeddings=True)
    assert set(q) == {"h.0.wqkv", "h.0.wo", "h.0.wfc", "h.0.wproj", "wte"}
    assert "wpe" in report.kept and "h.0.bqkv" in report.kept


def test_deterministic_and_independent_of_dict_order():
    w = _weights(_llama(), seed=1)
    a, _ = quantize_weights(w, "lut4", seed=3)
    b, _ = quantize_weights(dict(reversed(list(w.items()))), "lut4", seed=3)
    for k in a:
        assert np.array_equal(a[k].lut, b[k].lut) and np.array_equal(a[k].indices.payload, b[k].indices.payload)


def test_options_reach_the_quantizers():
    w = _weights(_llama())
    q, _ = quantize_weights(w, "lut6", lut_group_size=None)
    assert q["layers.0.w1"].lut.shape == (1, 1, 64, 1)
    q, _ = quantize_weights(w, "lut4")
    assert q["layers.0.w1"].lut.shape == (128 // 16, 1, 16, 1)  # default: 16 channels per table
    q, _ = quantize_weights(w, "int4", block_size=64)
    assert q["layers.0.w2"].scale.shape == (64, 2)


def test_errors_name_the_tensor():
    w = _weights(_llama())
    with pytest.raises(QuantizationError, match="unknown quantization scheme 'int3'"):
        quantize_weights(w, "int3")
    with pytest.raises(QuantizationError, match=r"layers\.0\.wq: .*group_size 48 does not divide"):
        quantize_weights(w, "lut4", lut_group_size=48)
    w["layers.1.wk"] = w["layers.1.wk"].astype(np.int32)
    with pytest.raises(QuantizationError, match=r"layers\.1\.wk: .*float16, float32 or float64"):
        quantize_weights(w, "int8")
    with pytest.raises(QuantizationError, match=r"layers\.0\.wv: a linear weight must be 2-D"):
        quantize_weights({"layers.0.wv": np.zeros((2, 3, 4), np.float32)}, "int8")
    with pytest.raises(QuantizationError, match="dict"):
        quantize_weights([("wq", np.zeros((2, 2)))], "int8")


def test_dequantized_weights_replace_only_the_quantized_tensors():
    w = _weights(_llama())
    q, _ = quantize_weights(w, "int4")
    d = dequantized_weights(w, q)
    assert set(d) == set(w) and d["layers.0.rms_att"] is w["layers.0.rms_att"]
    assert d["layers.1.w2"].dtype == np.float16 and np.array_equal(d["layers.1.w2"], q["layers.1.w2"].dequantize())
    with pytest.raises(QuantizationError, match="not in the weights"):
        dequantized_weights({}, q)
