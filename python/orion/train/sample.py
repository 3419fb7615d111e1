"""Text generation from trained fp32 weights on the CPU (greedy or temperature sampling).

A compact token-major numpy forward with a key/value cache, covering every feature of
:class:`orion.models.config.LlamaConfig` (q/k/v biases, q/k norms, per-layer RoPE from
:mod:`orion.models.rope`, sliding windows, query scale, sandwich norms, GeGLU, embedding scale, final
soft-capping); used for the sample printed at the end of ``orion train``.
"""

from __future__ import annotations

import numpy as np

from ..models.config import LlamaConfig
from .model import classifier


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w


def _rope(x, heads, ang):
    """x [n, heads*hd] rotated by ``ang`` [hd/2, n] (adjacent pairs)."""
    n, dd = x.shape
    hd = dd // heads
    c, s = np.cos(ang.T)[:, None, :], np.sin(ang.T)[:, None, :]
    xr = x.reshape(n, heads, hd // 2, 2)
    x0, x1 = xr[..., 0], xr[..., 1]
    return np.stack([x0 * c - x1 * s, x0 * s + x1 * c], axis=-1).reshape(n, dd)


def _act(cfg, a):
    if cfg.mlp_act == "silu":
        return a / (1 + np.exp(-a))
    return 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))


class Generator:
    def __init__(self, cfg: LlamaConfig, params: dict):
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
        H, KV, hd, eps = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.norm_eps
        x = p["tok_emb"][ids] * np.float32(cfg.embed_scale)
        for i in range(cfg.n_layers):
            q_ = f"layers.{i}."
            bias = (lambda k: p[q_ + k]) if cfg.qkv_bias else (lambda k: 0.0)
            ang = cfg.layer_rope(i).angles(hd, pos)
            h = _rms(x, p[q_ + "rms_att"], eps)
            q, k, v = h @ p[q_ + "wq"].T + bias("bq"), h @ p[q_ + "wk"].T + bias("bk"), h @ p[q_ + "wv"].T + bias("bv")
            if cfg.qk_norm:
                q = _rms(q.reshape(n, H, hd), p[q_ + "q_norm"], eps).reshape(n, H * hd)
                k = _rms(k.reshape(n, KV, hd), p[q_ + "k_norm"], eps).reshape(n, KV * hd)
            q, k = _rope(q, H, ang), _rope(k, KV, ang)
            self.k[i] = np.concatenate([self.k[i], k.astype(np.float32)])
            self.v[i] = np.concatenate([self.v[i], v.astype(np.float32)])
            T = self.k[i].shape[0]
            qh = q.reshape(n, H, hd).transpose(1, 0, 2)
            rep = H // KV
            kh = np.repeat(self.k[i].reshape(T, KV, hd).transpose(1, 0, 2), rep, axis=0)
            vh = np.repeat(self.v[i].reshape(T, KV, hd).transpose(1, 0, 2), rep, axis=0)
            sc = qh @ kh.transpose(0, 2, 1) * cfg.query_scale
            qi, kj = (self.pos + np.arange(n))[:, None], np.arange(T)[None, :]
            allowed = kj <= qi
            if cfg.layer_sliding(i):
                allowed &= kj > qi - cfg.sliding_window
            sc = np.where(allowed[None], sc, -np.inf)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            o = (sc @ vh).transpose(1, 0, 2).reshape(n, H * hd) @ p[q_ + "wo"].T
            x = x + (_rms(o, p[q_ + "rms_att_post"], eps) if cfg.sandwich_norms else o)
            h = _rms(x, p[q_ + "rms_ffn"], eps)
            f = (_act(cfg, h @ p[q_ + "w1"].T) * (h @ p[q_ + "w3"].T)) @ p[q_ + "w2"].T
            x = x + (_rms(f, p[q_ + "rms_ffn_post"], eps) if cfg.sandwich_norms else f)
        self.pos += n
        z = (_rms(x[-1:], p["rms_final"], eps) @ classifier(p).T)[0]
        if cfg.final_softcap:
            z = np.tanh(z / cfg.final_softcap) * cfg.final_softcap
        return z


def generate(cfg: LlamaConfig, params: dict, prompt_ids, max_new: int = 80, temperature: float = 0.0,
             seed: int = 0, stop_id=None) -> list[int]:
    """Continuation of ``prompt_ids`` (at most the model's context); greedy when ``temperature`` is 0.
    ``stop_id``: an id or a collection of ids that end the sample."""
    rng = np.random.default_rng(seed)
    stops = set() if stop_id is None else ({stop_id} if isinstance(stop_id, (int, np.integer)) else set(stop_id))
    gen = Generator(cfg, params)
    ids = list(prompt_ids)[-cfg.n_ctx:]
    logits = gen.feed(ids)
    out = []
    for _ in range(max_new):
        if gen.pos >= cfg.n_ctx:
            break
        if temperature <= 0:
            t = int(np.argmax(logits))
        else:
            z = logits / temperature
            z = np.exp(z - z.max())
            t = int(rng.choice(len(z), p=z / z.sum()))
        if t in stops:
            break
        out.append(t)
        logits = gen.feed([t])
    return out
