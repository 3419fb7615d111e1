"""Text generation from trained fp32 weights on the CPU (greedy or temperature sampling).

A compact token-major numpy forward (RMSNorm, adjacent-pair RoPE, causal attention, SwiGLU) with a
key/value cache; used for the sample printed at the end of ``orion train``.
"""

from __future__ import annotations

import numpy as np

from .model import ModelConfig, classifier


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def _rope(x, heads, pos, theta):
    """x [n, heads*hd] at positions ``pos`` [n] (adjacent pairs)."""
    n, dd = x.shape
    hd = dd // heads
    freq = theta ** (-np.arange(0, hd, 2) / hd)
    ang = pos[:, None] * freq[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    xr = x.reshape(n, heads, hd // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    return np.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1).reshape(n, dd)


class Generator:
    def __init__(self, cfg: ModelConfig, params: dict):
        self.cfg, self.p = cfg, {k: np.asarray(v, np.float32) for k, v in params.items()}
        self.reset()

    def reset(self):
        self.k = [np.zeros((0, self.cfg.kv_dim), np.float32) for _ in range(self.cfg.n_layers)]
        self.v = [np.zeros((0, self.cfg.kv_dim), np.float32) for _ in range(self.cfg.n_layers)]
        self.pos = 0

    def feed(self, ids) -> np.ndarray:
        """Appends tokens; returns the logits [V] after the last one."""
        cfg, p = self.cfg, self.p
        ids = np.asarray(ids, np.int64)
        n = len(ids)
        pos = np.arange(self.pos, self.pos + n, dtype=np.float64)
        H, KV, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        x = p["tok_emb"][ids]
        for i in range(cfg.n_layers):
            q_ = f"layers.{i}."
            h = _rms(x, p[q_ + "rms_att"], cfg.norm_eps)
            q = _rope(h @ p[q_ + "wq"].T, H, pos, cfg.rope_theta)
            k = _rope(h @ p[q_ + "wk"].T, KV, pos, cfg.rope_theta)
            self.k[i] = np.concatenate([self.k[i], k.astype(np.float32)])
            self.v[i] = np.concatenate([self.v[i], (h @ p[q_ + "wv"].T).astype(np.float32)])
            T = self.k[i].shape[0]
            qh = q.reshape(n, H, hd).transpose(1, 0, 2)
            rep = H // KV
            kh = np.repeat(self.k[i].reshape(T, KV, hd).transpose(1, 0, 2), rep, axis=0)
            vh = np.repeat(self.v[i].reshape(T, KV, hd).transpose(1, 0, 2), rep, axis=0)
            sc = qh @ kh.transpose(0, 2, 1) / np.sqrt(hd)
            allowed = np.arange(T)[None, :] <= (self.pos + np.arange(n))[:, None]
            sc = np.where(allowed[None], sc, -np.inf)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            x = x + (sc @ vh).transpose(1, 0, 2).reshape(n, H * hd) @ p[q_ + "wo"].T
            h = _rms(x, p[q_ + "rms_ffn"], cfg.norm_eps)
            a, b = h @ p[q_ + "w1"].T, h @ p[q_ + "w3"].T
            x = x + (a / (1 + np.exp(-a)) * b) @ p[q_ + "w2"].T
        self.pos += n
        return (_rms(x[-1:], p["rms_final"], cfg.norm_eps) @ classifier(p).T)[0]


def generate(cfg: ModelConfig, params: dict, prompt_ids, max_new: int = 80, temperature: float = 0.0,
             seed: int = 0, stop_id: int | None = None) -> list[int]:
    """Continuation of ``prompt_ids`` (at most the model's context); greedy when ``temperature`` is 0."""
    rng = np.random.default_rng(seed)
    gen = Generator(cfg, params)
    ids = list(prompt_ids)[-cfg.seq_len:]
    logits = gen.feed(ids)
    out = []
    for _ in range(max_new):
        if gen.pos >= cfg.seq_len:
            break
        if temperature <= 0:
            t = int(np.argmax(logits))
        else:
            z = logits / temperature
            z = np.exp(z - z.max())
            t = int(rng.choice(len(z), p=z / z.sum()))
        if stop_id is not None and t == stop_id:
            break
        out.append(t)
        logits = gen.feed([t])
    return out
