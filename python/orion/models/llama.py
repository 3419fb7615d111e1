"""Llama (and llama2.c "Stories" models) as ANE programs (reference/model-formats.md §3).

Same staging as :mod:`orion.models.gpt2`: stage 0 = RMSNorm → Wq/Wk/Wv + RoPE of layer 0; stage ``l`` =
attention of layer ``l-1`` over the KV cache (a program input; grouped-query heads broadcast) + Wo +
residual + RMSNorm + SwiGLU + residual, then the next layer's projections; stage L ends with the final
RMSNorm. RoPE uses llama2.c's adjacent-pair layout (HF rotate-half checkpoints are un-permuted by the
loader) with cos/sin tables passed as inputs so the same program serves every position.

Stage I/O (S query columns, T cache length, d = dim, kv = n_kv_heads * head_dim, hd = head_dim):
  inputs  ``x [1,d,1,S]``; stages < L: ``cos``/``sin [1,hd/2,1,S]``; stages >= 1: ``q_attn [1,d,1,S]``,
          ``k_cache``/``v_cache [1,kv,1,T]``, ``mask [1,1,S,T]``
  outputs stages < L: ``q [1,d,1,S]``, ``k``/``v [1,kv,1,S]`` (q, k rotated); stages >= 1 also ``x_out``;
          stage L: ``h [1,d,1,S]``
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, ops
from ..lora import graph_linear

__all__ = ["stage_graph", "embed", "classifier_weight", "rope_tables", "n_stages", "USES_ROPE", "QKV_FUSED"]

USES_ROPE = True
QKV_FUSED = False


def n_stages(cfg) -> int:
    return cfg.n_layers + 1


def embed(cfg, w: dict, ids, pos0: int) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64)
    return np.asarray(w["tok_emb"][ids], np.float32).T


def classifier_weight(cfg, w: dict) -> np.ndarray:
    return w["tok_emb"] if cfg.tie_embeddings else w["wcls"]


def rope_tables(cfg, positions) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin ``[1, hd/2, 1, S]`` (float32, as llama2.c computes them) for absolute ``positions``."""
    hd = cfg.head_dim
    freq = 1.0 / np.power(cfg.rope_theta, np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = freq[:, None] * np.asarray(positions, np.float64)[None, :]
    return (np.cos(ang).astype(np.float32).reshape(1, hd // 2, 1, -1),
            np.sin(ang).astype(np.float32).reshape(1, hd // 2, 1, -1))


def _lin(g: Graph, x, w: dict, key: str, layer: int, lora):
    """``W x`` for ``layers.{layer}.{key}`` (plus its LoRA branch when ``lora`` has slots for it)."""
    return graph_linear(g, x, f"{key}_{layer}", w[f"layers.{layer}.{key}"], slots=lora,
                        canonical=f"layers.{layer}.{key}")


def _qkv(g: Graph, cfg, w: dict, layer: int, x, cos, sin, lora=None):
    p = f"layers.{layer}."
    h = ops.rms_norm(x, w[p + "rms_att"], eps=cfg.norm_eps)
    q = _lin(g, h, w, "wq", layer, lora)
    k = _lin(g, h, w, "wk", layer, lora)
    v = _lin(g, h, w, "wv", layer, lora)
    q = ops.rope(q, cfg.n_heads, cos=cos, sin=sin, layout="adjacent")
    k = ops.rope(k, cfg.n_kv_heads, cos=cos, sin=sin, layout="adjacent")
    return q, k, v


def _attn_ffn(g: Graph, cfg, w: dict, layer: int, x, q, kc, vc, mask, lora=None):
    p = f"layers.{layer}."
    a = ops.causal_attention(q, kc, vc, cfg.n_heads, cfg.n_kv_heads, mask=mask)
    x = ops.add(x, _lin(g, a, w, "wo", layer, lora))
    h = ops.rms_norm(x, w[p + "rms_ffn"], eps=cfg.norm_eps)
    if lora is None:
        f = ops.swiglu_ffn(h, g.weight(f"w1_{layer}", w[p + "w1"]), g.weight(f"w2_{layer}", w[p + "w2"]),
                           g.weight(f"w3_{layer}", w[p + "w3"]))
    else:                                      # the same SwiGLU, each linear possibly with an adapter
        gate = ops.mul(ops.silu(_lin(g, h, w, "w1", layer, lora)), _lin(g, h, w, "w3", layer, lora))
        f = _lin(g, gate, w, "w2", layer, lora)
    return ops.add(x, f)


def stage_graph(cfg, w: dict, stage: int, S: int, T: int, lora=None) -> Graph:
    """Stage ``stage``'s graph; ``lora``: an :class:`orion.lora.AdapterSlots` giving the linears that get
    adapter inputs (``<weight>_lora_a`` / ``_lora_b``, see :func:`orion.lora.graph_linear`)."""
    d, L, kv, hd = cfg.d_model, cfg.n_layers, cfg.kv_dim, cfg.head_dim
    g = Graph(f"llama_s{stage}_S{S}_T{T}")
    x = g.input("x", (1, d, 1, S))
    if stage < L:
        cos = g.input("cos", (1, hd // 2, 1, S))
        sin = g.input("sin", (1, hd // 2, 1, S))
    if stage > 0:
        q = g.input("q_attn", (1, d, 1, S))
        kc = g.input("k_cache", (1, kv, 1, T))
        vc = g.input("v_cache", (1, kv, 1, T))
        mask = g.input("mask", (1, 1, S, T))
        x = _attn_ffn(g, cfg, w, stage - 1, x, q, kc, vc, mask, lora)
        if stage == L:
            g.output("h", ops.rms_norm(x, w["rms_final"], eps=cfg.norm_eps))
            return g
        g.output("x_out", x)
    q, k, v = _qkv(g, cfg, w, stage, x, cos, sin, lora)
    g.output("q", q)
    g.output("k", k)
    g.output("v", v)
    return g
