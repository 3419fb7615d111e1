"""GPT-2 as ANE programs.

Layout: activations ``[1, C, 1, S]``; linears are 1x1 convs with the weights baked; LayerNorm, tanh-GELU
and attention are the composites of :mod:`orion.ir` (explicit additive mask, -1e4; never SDPA, C06).

The model is cut at the attention inputs so that the KV cache can be a program input written on the
host: stage 0 = ``ln_1 → c_attn`` of layer 0; stage ``l`` (1..L-1) = attention of layer ``l-1`` over the
cache + ``c_proj`` + residual + MLP + residual, then ``ln_1 → c_attn`` of layer ``l``; stage L = the last
layer's attention/MLP + ``ln_f``. Each stage holds 12 weight tensors (within C18/C19's 15), the host
writes the new K/V columns into the next stage's cache surfaces, and the classifier (tied ``wte``, 73 MB
at 124M, C26) runs on the CPU or as chunked programs.

Stage I/O (S = query columns, T = cache length, d = n_embd):
  inputs  ``x [1,d,1,S]`` (residual stream; stage 0: token + position embeddings), stages >= 1 also
          ``q_attn [1,d,1,S]``, ``k_cache``/``v_cache [1,d,1,T]`` (batched decode: both ``[1,S*heads,T,hd]``,
          a region per column), ``mask [1,1,S,T]`` (additive, 0 / -1e4)
  outputs stages < L: ``qkv [1,3d,1,S]`` (rows q | k | v), stages >= 1 also ``x_out``; stage L: ``h [1,d,1,S]``
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, ops
from ..lora import graph_linear

__all__ = ["stage_graph", "embed", "classifier_weight", "n_stages", "USES_ROPE", "QKV_FUSED"]

USES_ROPE = False
QKV_FUSED = True


def n_stages(cfg) -> int:
    return cfg.n_layers + 1


def embed(cfg, w: dict, ids, pos0) -> np.ndarray:
    """Token + position embeddings on the CPU: ``[d, n]`` float32; ``pos0``: the first token's position
    (the others follow), or one position per token (batched decode)."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    pos = slice(pos0, pos0 + n) if np.ndim(pos0) == 0 else np.asarray(pos0, np.int64)
    x = np.asarray(w["wte"][ids], np.float32) + np.asarray(w["wpe"][pos], np.float32)
    return x.T


def classifier_weight(cfg, w: dict) -> np.ndarray:
    return w["wte"]


def _lin(g: Graph, x, w: dict, key: str, bias: str, layer: int, lora):
    """``W x + b`` for ``h.{layer}.{key}`` (plus its LoRA branch when ``lora`` has slots for it)."""
    p = f"h.{layer}."
    return graph_linear(g, x, f"{key}_{layer}", w[p + key], w[p + bias], slots=lora, canonical=p + key)


def _qkv(g: Graph, cfg, w: dict, layer: int, x, lora=None):
    p = f"h.{layer}."
    h = ops.layer_norm(x, w[p + "ln1.g"], w[p + "ln1.b"], eps=cfg.norm_eps)
    return _lin(g, h, w, "wqkv", "bqkv", layer, lora)


def _attn_mlp(g: Graph, cfg, w: dict, layer: int, x, q, kc, vc, mask, lora=None, regions: bool = False):
    p = f"h.{layer}."
    attention = ops.region_attention if regions else ops.causal_attention
    a = attention(q, kc, vc, cfg.n_heads, mask=mask)
    x = ops.add(x, _lin(g, a, w, "wo", "bo", layer, lora))
    h = ops.layer_norm(x, w[p + "ln2.g"], w[p + "ln2.b"], eps=cfg.norm_eps)
    m = ops.gelu(_lin(g, h, w, "wfc", "bfc", layer, lora))
    return ops.add(x, _lin(g, m, w, "wproj", "bproj", layer, lora))


def stage_graph(cfg, w: dict, stage: int, S: int, T: int, lora=None, regions: bool = False) -> Graph:
    """Stage ``stage``'s graph; ``lora``: an :class:`orion.lora.AdapterSlots` giving the linears that get
    adapter inputs (``<weight>_lora_a`` / ``_lora_b``, see :func:`orion.lora.graph_linear`); ``regions``
    (batched decode, :mod:`orion.models.batch`): the caches hold one region of T positions per query column
    (``k_cache`` and ``v_cache [1, S * heads, T, hd]``), and column i attends only to
    region i (``ops.region_attention``)."""
    d, L = cfg.d_model, cfg.n_layers
    g = Graph(f"gpt2_s{stage}_S{S}_T{T}" + ("_regions" if regions else ""))
    x = g.input("x", (1, d, 1, S))
    if stage > 0:
        q = g.input("q_attn", (1, d, 1, S))
        rows, hd = S * cfg.n_heads, d // cfg.n_heads
        kc = g.input("k_cache", (1, rows, T, hd) if regions else (1, d, 1, T))
        vc = g.input("v_cache", (1, rows, T, hd) if regions else (1, d, 1, T))
        mask = g.input("mask", (1, 1, S, T))
        x = _attn_mlp(g, cfg, w, stage - 1, x, q, kc, vc, mask, lora, regions)
        if stage == L:
            g.output("h", ops.layer_norm(x, w["ln_f.g"], w["ln_f.b"], eps=cfg.norm_eps))
            return g
        g.output("x_out", x)
    g.output("qkv", _qkv(g, cfg, w, stage, x, lora))
    return g
