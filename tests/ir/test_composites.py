"""Composites through the simulator against independent float64 numpy references.

Tolerance: as test_ops (4·2^-10 relative to max(|ref|, max|ref|/8) + 1e-3); attention and norms chain
~10 fp16 roundings, so 8·2^-10 is used there.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler_helpers import assert_fp16_close, run_sim, rng  # noqa: F401 (fixture)
from orion.ir import Graph, evaluate, ops

TOL = 8 * 2.0 ** -10


def _x(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float16)


def test_linear_with_bias(rng):
    g = Graph()
    x = g.input("x", (1, 96, 1, 64))
    w = rng.standard_normal((128, 96)).astype(np.float32) / 10
    b = rng.standard_normal(128).astype(np.float32)
    g.output("y", ops.linear(x, g.weight("w", w), b))
    a = _x(rng, (1, 96, 1, 64))
    ref = (w.astype(np.float16).astype(np.float64) @ a[0, :, 0, :].astype(np.float64) + b[:, None])[None, :, None]
    assert_fp16_close(run_sim(g, {"x": a})["y"], ref)


@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_layer_norm(rng, scale):
    g = Graph()
    x = g.input("x", (1, 256, 1, 64))
    gamma, beta = rng.standard_normal(256), rng.standard_normal(256)
    g.output("y", ops.layer_norm(x, gamma, beta, eps=1e-5))
    a = _x(rng, (1, 256, 1, 64), scale)
    a64 = a.astype(np.float64)
    mu = a64.mean(axis=1, keepdims=True)
    var = ((a64 - mu) ** 2).mean(axis=1, keepdims=True)
    ref = (a64 - mu) / np.sqrt(var + 1e-5) * gamma.reshape(1, -1, 1, 1) + beta.reshape(1, -1, 1, 1)
    assert_fp16_close(run_sim(g, {"x": a})["y"], ref, rtol=TOL)


@pytest.mark.parametrize("scale", [0.1, 1.0, 40.0])
def test_rms_norm(rng, scale):
    """scale 40: RMS 40 overflows the naive fp16 sum of 768 squares (above RMS ~9.2); pre-scaling fixes it."""
    g = Graph()
    x = g.input("x", (1, 768, 1, 32))
    w = rng.uniform(0.5, 1.5, 768)
    g.output("y", ops.rms_norm(x, w))
    a = _x(rng, (1, 768, 1, 32), scale)
    a64 = a.astype(np.float64)
    ref = a64 / np.sqrt((a64 ** 2).mean(axis=1, keepdims=True) + 1e-5) * w.reshape(1, -1, 1, 1)
    assert_fp16_close(run_sim(g, {"x": a})["y"], ref, rtol=TOL)


def _attention_ref(q, k, v, h, hkv, mask):
    d, sq = q.shape[1], q.shape[3]
    hd = d // h
    out = np.zeros_like(q)
    for i in range(h):
        j = i // (h // hkv)
        qi = q[0, i * hd:(i + 1) * hd, 0, :].T          # [Sq, hd]
        ki = k[0, j * hd:(j + 1) * hd, 0, :].T
        vi = v[0, j * hd:(j + 1) * hd, 0, :].T
        s = qi @ ki.T / math.sqrt(hd) + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[0, i * hd:(i + 1) * hd, 0, :] = (p @ vi).T
    return out


@pytest.mark.parametrize("h,hkv,sq,skv", [(4, 4, 64, 64), (4, 2, 64, 64), (4, 4, 16, 48)])
def test_causal_attention(rng, h, hkv, sq, skv):
    hd = 16
    g = Graph()
    q = g.input("q", (1, h * hd, 1, sq))
    k = g.input("k", (1, hkv * hd, 1, skv))
    v = g.input("v", (1, hkv * hd, 1, skv))
    g.output("o", ops.causal_attention(q, k, v, n_heads=h, n_kv_heads=hkv))
    arrays = {"q": _x(rng, q.shape), "k": _x(rng, k.shape), "v": _x(rng, v.shape)}
    i = np.arange(sq)[:, None] + (skv - sq)
    mask = np.where(np.arange(skv)[None, :] <= i, 0.0, -1e4)
    ref = _attention_ref(*(arrays[n].astype(np.float64) for n in "qkv"), h, hkv, mask)
    assert_fp16_close(run_sim(g, arrays)["o"], ref, rtol=TOL)


def test_attention_with_mask_input(rng):
    """Decode-style: the additive mask is a program input, the KV cache too."""
    g = Graph()
    q = g.input("q", (1, 64, 1, 16))
    k = g.input("k", (1, 64, 1, 64))
    v = g.input("v", (1, 64, 1, 64))
    m = g.input("m", (1, 1, 16, 64))
    g.output("o", ops.causal_attention(q, k, v, n_heads=4, mask=m))
    arrays = {n: _x(rng, s.shape) for n, s in (("q", q), ("k", k), ("v", v))}
    mask = np.where(rng.random((1, 1, 16, 64)) < 0.3, -1e4, 0.0).astype(np.float16)
    mask[..., 0] = 0
    arrays["m"] = mask
    ref = _attention_ref(*(arrays[n].astype(np.float64) for n in "qkv"), 4, 4, mask[0, 0].astype(np.float64))
    assert_fp16_close(run_sim(g, arrays)["o"], ref, rtol=TOL)


@pytest.mark.parametrize("h,hkv", [(4, 4), (4, 2)])
def test_region_attention_column_i_attends_to_region_i(rng, h, hkv):
    """Batched decode: query column i sees only region i of the caches (k and v [1, S * hkv, R, hd],
    position-major) under mask row i -
    equal to a float64 reference, and bit-identical to causal_attention of that column alone over its
    region (what makes a batched sequence equal to the same sequence generated alone)."""
    hd, s, r = 16, 16, 64
    g = Graph()
    q = g.input("q", (1, h * hd, 1, s))
    k = g.input("k", (1, s * hkv, r, hd))
    v = g.input("v", (1, s * hkv, r, hd))
    m = g.input("m", (1, 1, s, r))
    g.output("o", ops.region_attention(q, k, v, n_heads=h, n_kv_heads=hkv, mask=m))
    arrays = {n: _x(rng, t.shape) for n, t in (("q", q), ("k", k), ("v", v))}
    # region i as a single-sequence cache [1, kv, 1, R]
    region = {n: arrays[n].reshape(s, hkv, r, hd).transpose(0, 1, 3, 2).reshape(s, 1, hkv * hd, 1, r) for n in "kv"}
    lens = rng.integers(1, r + 1, s)
    arrays["m"] = np.where(np.arange(r)[None, :] < lens[:, None], 0.0, -1e4).astype(np.float16)[None, None]
    got = run_sim(g, arrays)["o"]
    a64 = {n: arrays[n].astype(np.float64) for n in "qkvm"}
    for i in range(s):
        ref = _attention_ref(a64["q"][..., i:i + 1], region["k"][i].astype(np.float64),
                             region["v"][i].astype(np.float64), h, hkv, a64["m"][0, 0, i:i + 1])
        assert_fp16_close(got[..., i:i + 1], ref, rtol=TOL)
    alone = Graph()                                  # one decode program per column, its region as the cache
    qa = alone.input("q", (1, h * hd, 1, s))
    ka = alone.input("k", (1, hkv * hd, 1, r))
    va = alone.input("v", (1, hkv * hd, 1, r))
    ma = alone.input("m", (1, 1, s, r))
    alone.output("o", ops.causal_attention(qa, ka, va, n_heads=h, n_kv_heads=hkv, mask=ma))
    for i in (0, 5, s - 1):
        one = run_sim(alone, {"q": arrays["q"], "k": region["k"][i], "v": region["v"][i],
                              "m": np.repeat(arrays["m"][:, :, i:i + 1], s, axis=2)})["o"]
        assert np.array_equal(one[..., i].view(np.uint16), got[..., i].view(np.uint16)), i


def test_region_attention_checks_its_cache_layout():
    from orion.ir.graph import GraphError
    g = Graph()
    q = g.input("q", (1, 64, 1, 16))
    k = g.input("k", (1, 64, 32, 16))                   # 16 regions x 4 heads, R = 32, head_dim 16
    v = g.input("v", (1, 64, 32, 16))
    hd_major = g.input("k_hd_major", (1, 64, 16, 32))
    with pytest.raises(GraphError, match=r"region_attention: k\[1, 64, 16, 32\] and v\[1, 64, 32, 16\] must both "
                                         r"be \[1, 64, R, 16\]"):
        ops.region_attention(q, hd_major, v, n_heads=4)  # K stored head_dim-major
    with pytest.raises(GraphError, match="region_attention: mask"):
        ops.region_attention(q, k, v, n_heads=4, mask=np.zeros((1, 1, 16, 16)))
    assert ops.region_attention(q, k, v, n_heads=4).shape == (1, 64, 1, 16)


def _rope_llama2c(x, n_heads, pos0=0, base=10000.0):
    """llama2.c's loop: adjacent pairs, freq = base^(-(i % head_size)/head_size) for even i."""
    d, s = x.shape[1], x.shape[3]
    hd = d // n_heads
    out = x.copy()
    for t in range(s):
        for i in range(0, d, 2):
            head_dim = i % hd
            freq = 1.0 / base ** (head_dim / hd)
            c, sn = math.cos((pos0 + t) * freq), math.sin((pos0 + t) * freq)
            v0, v1 = x[0, i, 0, t], x[0, i + 1, 0, t]
            out[0, i, 0, t] = v0 * c - v1 * sn
            out[0, i + 1, 0, t] = v0 * sn + v1 * c
    return out


def _rope_rotate_half(x, n_heads, pos0=0, base=10000.0):
    d, s = x.shape[1], x.shape[3]
    hd = d // n_heads
    xh = x.reshape(n_heads, hd, s)
    inv = base ** (-np.arange(0, hd, 2) / hd)
    ang = inv[:, None] * (pos0 + np.arange(s))[None, :]
    cos, sin = np.concatenate([np.cos(ang)] * 2), np.concatenate([np.sin(ang)] * 2)
    rot = np.concatenate([-xh[:, hd // 2:], xh[:, :hd // 2]], axis=1)
    return (xh * cos + rot * sin).reshape(x.shape)


@pytest.mark.parametrize("layout", ["adjacent", "rotate_half"])
def test_rope(rng, layout):
    g = Graph()
    x = g.input("x", (1, 128, 1, 32))
    g.output("y", ops.rope(x, n_heads=4, offset=5, layout=layout))
    a = _x(rng, (1, 128, 1, 32))
    fn = _rope_llama2c if layout == "adjacent" else _rope_rotate_half
    ref = fn(a.astype(np.float64), 4, pos0=5)
    assert_fp16_close(evaluate(g, {"x": a})["y"], ref, rtol=1e-6, atol=1e-6)   # the graph (fp32 tables) is exact
    assert_fp16_close(run_sim(g, {"x": a})["y"], ref)


def test_rope_with_table_inputs(rng):
    g = Graph()
    x = g.input("x", (1, 64, 1, 16))
    cos = g.input("cos", (1, 8, 1, 16))
    sin = g.input("sin", (1, 8, 1, 16))
    g.output("y", ops.rope(x, n_heads=4, cos=cos, sin=sin))
    pos = np.arange(100, 116)
    from orion.ir.composites import rope_tables
    c, s = rope_tables(16, pos)
    a = _x(rng, (1, 64, 1, 16))
    out = run_sim(g, {"x": a, "cos": c.astype(np.float16), "sin": s.astype(np.float16)})["y"]
    assert_fp16_close(out, _rope_llama2c(a.astype(np.float64), 4, pos0=100), atol=3e-3)


def test_gelu_silu_composite_refs(rng):
    g = Graph()
    x = g.input("x", (1, 64, 1, 64))
    g.output("g", ops.gelu(x))
    g.output("s", ops.silu(x))
    a = _x(rng, (1, 64, 1, 64), 3.0)
    a64 = a.astype(np.float64)
    out = run_sim(g, {"x": a})
    assert_fp16_close(out["g"], 0.5 * a64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (a64 + 0.044715 * a64 ** 3))))
    assert_fp16_close(out["s"], a64 / (1 + np.exp(-a64)))


def test_swiglu_ffn(rng):
    d, h = 64, 160
    g = Graph()
    x = g.input("x", (1, d, 1, 32))
    w1, w3 = rng.standard_normal((h, d)) / 8, rng.standard_normal((h, d)) / 8
    w2 = rng.standard_normal((d, h)) / 12
    g.output("y", ops.swiglu_ffn(x, g.weight("w1", w1), g.weight("w2", w2), g.weight("w3", w3)))
    a = _x(rng, (1, d, 1, 32))
    X = a[0, :, 0, :].astype(np.float64)
    f16 = lambda m: m.astype(np.float16).astype(np.float64)  # noqa: E731 (weights are baked as fp16)
    h1, h3 = f16(w1) @ X, f16(w3) @ X
    ref = (f16(w2) @ (h1 / (1 + np.exp(-h1)) * h3))[None, :, None, :]
    assert_fp16_close(run_sim(g, {"x": a})["y"], ref, rtol=TOL)
