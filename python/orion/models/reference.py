"""Float64 numpy forward passes of GPT-2 and Llama: the test oracle.

Written independently of the graph builders: token-major activations ``[n, d]``, ``x @ W.T`` matmuls,
full causal attention recomputed over the whole sequence (no cache), RoPE straight from the llama2.c
``run.c`` loop (or HF's rotate-half for un-permuted HF weights), exact softmax. Weights are the
canonical dicts of :mod:`orion.models.loaders` (any float dtype; computed in float64).
"""

from __future__ import annotations

import math

import numpy as np

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


def _gelu_new(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_forward(cfg, w: dict, ids) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    d = cfg.d_model
    x = _f(w["wte"])[ids] + _f(w["wpe"])[:n]
    for i in range(cfg.n_layers):
        p = f"h.{i}."
        h = _layer_norm(x, w[p + "ln1.g"], w[p + "ln1.b"], cfg.norm_eps)
        qkv = h @ _f(w[p + "wqkv"]).T + _f(w[p + "bqkv"])
        q, k, v = qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:]
        a = _attention(q, k, v, cfg.n_heads, cfg.n_heads)
        x = x + a @ _f(w[p + "wo"]).T + _f(w[p + "bo"])
        h = _layer_norm(x, w[p + "ln2.g"], w[p + "ln2.b"], cfg.norm_eps)
        m = _gelu_new(h @ _f(w[p + "wfc"]).T + _f(w[p + "bfc"]))
        x = x + m @ _f(w[p + "wproj"]).T + _f(w[p + "bproj"])
    x = _layer_norm(x, w["ln_f.g"], w["ln_f.b"], cfg.norm_eps)
    return x @ _f(w["wte"]).T


def _rms_norm(x, g, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * _f(g)


def _rope_interleaved(x, head_dim, theta):
    """llama2.c run.c: for every even i, pair (i, i+1) rotated by pos * theta^(-(i % hd)/hd)."""
    n, dim = x.shape
    i = np.arange(0, dim, 2)
    freq = 1.0 / theta ** ((i % head_dim) / head_dim)
    ang = np.arange(n, dtype=np.float64)[:, None] * freq[None, :]
    c, s = np.cos(ang), np.sin(ang)
    v0, v1 = x[:, 0::2], x[:, 1::2]
    out = np.empty_like(x)
    out[:, 0::2] = v0 * c - v1 * s
    out[:, 1::2] = v0 * s + v1 * c
    return out


def _rope_rotate_half(x, head_dim, theta):
    """HF LlamaRotaryEmbedding: x * cos + rotate_half(x) * sin per head, pairs (j, j + hd/2)."""
    n, dim = x.shape
    half = head_dim // 2
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = np.arange(n, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, axis=1)
    sin = np.concatenate([np.sin(ang)] * 2, axis=1)
    out = np.empty_like(x)
    for h in range(dim // head_dim):
        xh = x[:, h * head_dim:(h + 1) * head_dim]
        rot = np.concatenate([-xh[:, half:], xh[:, :half]], axis=1)
        out[:, h * head_dim:(h + 1) * head_dim] = xh * cos + rot * sin
    return out


def llama_forward(cfg, w: dict, ids, rope_layout: str = "interleaved") -> np.ndarray:
    """``rope_layout``: "interleaved" (llama2.c / canonical weights) or "rotate_half" (HF weights whose
    Wq/Wk rows were NOT un-permuted)."""
    rope = {"interleaved": _rope_interleaved, "rotate_half": _rope_rotate_half}[rope_layout]
    ids = np.asarray(ids, dtype=np.int64)
    hd = cfg.d_model // cfg.n_heads
    x = _f(w["tok_emb"])[ids]
    for i in range(cfg.n_layers):
        p = f"layers.{i}."
        h = _rms_norm(x, w[p + "rms_att"], cfg.norm_eps)
        q = rope(h @ _f(w[p + "wq"]).T, hd, cfg.rope_theta)
        k = rope(h @ _f(w[p + "wk"]).T, hd, cfg.rope_theta)
        v = h @ _f(w[p + "wv"]).T
        x = x + _attention(q, k, v, cfg.n_heads, cfg.n_kv_heads) @ _f(w[p + "wo"]).T
        h = _rms_norm(x, w[p + "rms_ffn"], cfg.norm_eps)
        g = h @ _f(w[p + "w1"]).T
        u = h @ _f(w[p + "w3"]).T
        x = x + (g / (1.0 + np.exp(-g)) * u) @ _f(w[p + "w2"]).T
    x = _rms_norm(x, w["rms_final"], cfg.norm_eps)
    cls = w["tok_emb"] if cfg.tie_embeddings else w["wcls"]
    return x @ _f(cls).T


def forward(cfg, w: dict, ids, **kw) -> np.ndarray:
    """Logits ``[n, V]`` for every position of ``ids``."""
    if cfg.family == "gpt2":
        return gpt2_forward(cfg, w, ids)
    return llama_forward(cfg, w, ids, **kw)


def greedy(cfg, w: dict, ids, n_new: int, **kw) -> list[int]:
    """Greedy continuation by full recompute at every step (no cache)."""
    seq = list(ids)
    for _ in range(n_new):
        seq.append(int(np.argmax(forward(cfg, w, seq, **kw)[-1])))
    return seq[len(ids):]
