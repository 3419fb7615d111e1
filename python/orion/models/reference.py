"""Float64 numpy forward passes of GPT-2 and the Llama-style families: the test oracle.

Written independently of the graph builders: token-major activations ``[n, d]``, ``x @ W.T`` matmuls,
full causal attention recomputed over the whole sequence (no cache), RoPE straight from the llama2.c
``run.c`` loop (or HF's rotate-half for un-permuted HF weights) with the frequencies of
:mod:`orion.models.rope` and the tanh GELU of :mod:`orion.ir.npmath`, exact softmax, each family feature
written out as transformers computes it. Weights are the canonical dicts of :mod:`orion.models.loaders` (any
float dtype; computed in float64).
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.npmath import gelu_tanh

__all__ = ["forward", "gpt2_forward", "llama_forward", "greedy"]


def _f(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    s = s - s.max(axis=-1, keepdims=True)
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def _attention(q, k, v, n_heads, n_kv_heads):
    """q [n, H*hd], k/v [n, Hkv*hd] -> [n, H*hd]; causal, every head separately."""
    n, dq = q.shape
    hd = dq // n_heads
    group = n_heads // n_kv_heads
    out = np.zeros_like(q)
    causal = np.triu(np.ones((n, n), dtype=bool), 1)
    for h in range(n_heads):
        kh = h // group
        qh = q[:, h * hd:(h + 1) * hd]
        kk = k[:, kh * hd:(kh + 1) * hd]
        vv = v[:, kh * hd:(kh + 1) * hd]
        s = qh @ kk.T / math.sqrt(hd)
        s[causal] = -np.inf
        out[:, h * hd:(h + 1) * hd] = _softmax_rows(s) @ vv
    return out


def _layer_norm(x, g, b, eps):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * _f(g) + _f(b)


def _no_hook(name: str, x: np.ndarray) -> np.ndarray:
    return x


def gpt2_forward(cfg, w: dict, ids, linear_input=None) -> np.ndarray:
    """``linear_input(name, x) -> x``: called with every layer linear's input (``h.0.wqkv`` ...) before the
    matmul, its result is what the linear multiplies (calibration taps, W8A8 emulation)."""
    lin = linear_input or _no_hook
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    d = cfg.d_model
    x = _f(w["wte"])[ids] + _f(w["wpe"])[:n]
    for i in range(cfg.n_layers):
        p = f"h.{i}."
        h = _layer_norm(x, w[p + "ln1.g"], w[p + "ln1.b"], cfg.norm_eps)
        qkv = lin(p + "wqkv", h) @ _f(w[p + "wqkv"]).T + _f(w[p + "bqkv"])
        q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
        a = _attention(q, k, v, cfg.n_heads, cfg.n_heads)
        x = x + lin(p + "wo", a) @ _f(w[p + "wo"]).T + _f(w[p + "bo"])
        h = _layer_norm(x, w[p + "ln2.g"], w[p + "ln2.b"], cfg.norm_eps)
        m = gelu_tanh(lin(p + "wfc", h) @ _f(w[p + "wfc"]).T + _f(w[p + "bfc"]))
        x = x + lin(p + "wproj", m) @ _f(w[p + "wproj"]).T + _f(w[p + "bproj"])
    x = _layer_norm(x, w["ln_f.g"], w["ln_f.b"], cfg.norm_eps)
    return x @ _f(w["wte"]).T


def _rms_norm(x, g, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * _f(g)


def _rope_interleaved(x, head_dim, inv_freq):
    """llama2.c run.c: within every head, pair (2i, 2i+1) rotated by pos * inv_freq[i]."""
    n, dim = x.shape
    freq = np.tile(inv_freq, dim // head_dim)
    ang = np.arange(n, dtype=np.float64)[:, None] * freq[None, :]
    c, s = np.cos(ang), np.sin(ang)
    v0, v1 = x[:, 0::2], x[:, 1::2]
    out = np.empty_like(x)
    out[:, 0::2] = v0 * c - v1 * s
    out[:, 1::2] = v0 * s + v1 * c
    return out


def _rope_rotate_half(x, head_dim, inv_freq):
    """HF LlamaRotaryEmbedding: x * cos + rotate_half(x) * sin per head, pairs (j, j + hd/2)."""
    n, dim = x.shape
    half = head_dim // 2
    ang = np.arange(n, dtype=np.float64)[:, None] * inv_freq[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=1)
    sin = np.concatenate([np.sin(ang)] * 2, axis=1)
    out = np.empty_like(x)
    for h in range(dim // head_dim):
        xh = x[:, h * head_dim:(h + 1) * head_dim]
        rot = np.concatenate([-xh[:, half:], xh[:, :half]], axis=1)
        out[:, h * head_dim:(h + 1) * head_dim] = xh * cos + rot * sin
    return out


def _attention_llama(q, k, v, cfg, window: int | None):
    """Causal attention of a Llama-style layer: grouped-query heads, the config's query scale, keys
    j > i - window only when ``window`` is set."""
    n = q.shape[0]
    hd, group = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    hidden = j > i
    if window is not None:
        hidden |= j <= i - window
    out = np.zeros((n, cfg.n_heads * hd))
    for h in range(cfg.n_heads):
        kh = h // group
        s = q[:, h * hd:(h + 1) * hd] @ k[:, kh * hd:(kh + 1) * hd].T * cfg.query_scale
        s[hidden] = -np.inf
        out[:, h * hd:(h + 1) * hd] = _softmax_rows(s) @ v[:, kh * hd:(kh + 1) * hd]
    return out


def _head_rms(x, g, n_heads, eps):
    n, dim = x.shape
    return _rms_norm(x.reshape(n, n_heads, dim // n_heads), g, eps).reshape(n, dim)


def llama_forward(cfg, w: dict, ids, rope_layout: str = "interleaved", stats: dict | None = None,
                  linear_input=None) -> np.ndarray:
    """``rope_layout``: "interleaved" (llama2.c / canonical weights) or "rotate_half" (HF weights whose
    Wq/Wk rows were NOT un-permuted). ``stats``: filled with ``max_abs_residual`` (the largest value the
    residual stream takes), ``max_abs_branch`` (the largest sublayer value the residual scale carries: the
    up projection, act·up and both projections that write into the stream), for the fp16 safety check.
    ``linear_input``: as in :func:`gpt2_forward` (``layers.0.wq`` ...)."""
    lin = linear_input or _no_hook
    rope = {"interleaved": _rope_interleaved, "rotate_half": _rope_rotate_half}[rope_layout]
    ids = np.asarray(ids, dtype=np.int64)
    hd = cfg.head_dim
    x = _f(np.asarray(w["tok_emb"])[ids]) * float(np.float32(cfg.embed_scale))
    peak, branch = np.abs(x).max(), 0.0
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        bias = (lambda k: _f(w[p + k])) if cfg.qkv_bias else (lambda k: 0.0)
        inv = cfg.layer_rope(i).inv_freq(hd)
        h = _rms_norm(x, w[p + "rms_att"], cfg.norm_eps)
        q = lin(p + "wq", h) @ _f(w[p + "wq"]).T + bias("bq")
        k = lin(p + "wk", h) @ _f(w[p + "wk"]).T + bias("bk")
        v = lin(p + "wv", h) @ _f(w[p + "wv"]).T + bias("bv")
        if cfg.qk_norm:
            q = _head_rms(q, w[p + "q_norm"], cfg.n_heads, cfg.norm_eps)
            k = _head_rms(k, w[p + "k_norm"], cfg.n_kv_heads, cfg.norm_eps)
        q, k = rope(q, hd, inv), rope(k, hd, inv)
        a = _attention_llama(q, k, v, cfg, cfg.sliding_window if cfg.layer_sliding(i) else None)
        a = lin(p + "wo", a) @ _f(w[p + "wo"]).T
        branch = max(branch, np.abs(a).max())
        x = x + (_rms_norm(a, w[p + "rms_att_post"], cfg.norm_eps) if cfg.sandwich_norms else a)
        peak = max(peak, np.abs(x).max())
        h = _rms_norm(x, w[p + "rms_ffn"], cfg.norm_eps)
        g = lin(p + "w1", h) @ _f(w[p + "w1"]).T
        u = lin(p + "w3", h) @ _f(w[p + "w3"]).T
        act = g / (1.0 + np.exp(-g)) if cfg.mlp_act == "silu" else gelu_tanh(g)
        f = lin(p + "w2", act * u) @ _f(w[p + "w2"]).T
        branch = max(branch, np.abs(u).max(), np.abs(act * u).max(), np.abs(f).max())
        x = x + (_rms_norm(f, w[p + "rms_ffn_post"], cfg.norm_eps) if cfg.sandwich_norms else f)
        peak = max(peak, np.abs(x).max())
    if stats is not None:
        stats["max_abs_residual"] = float(peak)
        stats["max_abs_branch"] = float(branch)
        return x
    x = _rms_norm(x, w["rms_final"], cfg.norm_eps)
    cls = w["tok_emb"] if cfg.tie_embeddings else w["wcls"]
    z = x @ _f(cls).T
    if cfg.final_softcap:
        z = np.tanh(z / cfg.final_softcap) * cfg.final_softcap
    return z


def forward(cfg, w: dict, ids, **kw) -> np.ndarray:
    """Logits ``[n, V]`` for every position of ``ids``."""
    if cfg.family == "gpt2":
        return gpt2_forward(cfg, w, ids, **kw)
    return llama_forward(cfg, w, ids, **kw)


def greedy(cfg, w: dict, ids, n_new: int, **kw) -> list[int]:
    """Greedy continuation by full recompute at every step (no cache)."""
    seq = list(ids)
    for _ in range(n_new):
        seq.append(int(np.argmax(forward(cfg, w, seq, **kw)[-1])))
    return seq[len(ids):]
