"""Llama and its descendants (llama2.c "Stories", Llama 3, SmolLM, Qwen 2.5/3, Mistral, Gemma 3, Phi-3) as
ANE programs (reference/model-formats.md §3); the variants' switches are fields of ``LlamaConfig``.

Same staging as :mod:`orion.models.gpt2`: stage 0 = RMSNorm → Wq/Wk/Wv + RoPE of layer 0; stage ``l`` =
attention of layer ``l-1`` over the KV cache (a program input; grouped-query heads broadcast) + Wo +
residual + RMSNorm + SwiGLU + residual, then the next layer's projections; stage L ends with the final
RMSNorm. RoPE uses llama2.c's adjacent-pair layout (HF rotate-half checkpoints are un-permuted by the
loader) with cos/sin tables passed as inputs so the same program serves every position.

Stage I/O (S query columns, T cache length, d = dim, kv = n_kv_heads * head_dim, hd = head_dim):
  inputs  ``x [1,d,1,S]``; stages < L: ``cos``/``sin [1,hd/2,1,S]`` (this stage's layer's RoPE);
          stages >= 1: ``q_attn [1,q,1,S]`` (q = n_heads * hd),
          ``k_cache``/``v_cache [1,kv,1,T]`` (batched decode: both ``[1,S*n_kv_heads,T,hd]``),
          ``mask [1,1,S,T]`` (full or sliding, by the layer's type)
  outputs stages < L: ``q [1,q,1,S]``, ``k``/``v [1,kv,1,S]`` (q, k rotated); stages >= 1 also ``x_out``;
          stage L: ``h [1,d,1,S]``
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, ops
from ..lora import graph_linear
from .fp16_safety import Fp16Plan

__all__ = ["stage_graph", "embed", "classifier_weight", "rope_tables", "n_stages", "USES_ROPE", "QKV_FUSED",
           "SHARED_STAGES"]

USES_ROPE = True
QKV_FUSED = False
SHARED_STAGES = True        # stage_graph(shared=True): one program for every middle stage


def n_stages(cfg) -> int:
    return cfg.n_layers + 1


def embed(cfg, w: dict, ids, pos0) -> np.ndarray:
    """Token embeddings ``[d, n]`` float32, times the family's embedding scale (Gemma: sqrt(d), in fp32);
    positions (``pos0``: the first one, or one per token) do not enter (RoPE)."""
    ids = np.asarray(ids, dtype=np.int64)
    x = np.asarray(w["tok_emb"][ids], np.float32)
    if cfg.embed_scale != 1.0:
        x = x * np.float32(cfg.embed_scale)
    return x.T


def classifier_weight(cfg, w: dict) -> np.ndarray:
    return w["tok_emb"] if cfg.tie_embeddings else w["wcls"]


def rope_tables(cfg, positions, layer: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin ``[1, hd/2, 1, S]`` (float32) of ``layer``'s RoPE for absolute ``positions``."""
    ang = cfg.layer_rope(layer).angles(cfg.head_dim, positions)
    hd = cfg.head_dim
    return (np.cos(ang).astype(np.float32).reshape(1, hd // 2, 1, -1),
            np.sin(ang).astype(np.float32).reshape(1, hd // 2, 1, -1))


def _param(g: Graph, w: dict, key: str, layer: int, shared: bool, shape=None, factor: float | None = None):
    """Layer ``layer``'s tensor ``key`` (times ``factor``): the array, baked into the program, or - in a
    program that every layer shares (``shared``) - a program input named ``key`` whose value each layer
    binds (``shape``: its graph shape). A compressed weight enters a shared program decoded to fp16: the
    ``constexpr_*`` ops that keep it compressed take constant operands only."""
    a = w[f"layers.{layer}.{key}"]
    if factor is not None:
        a = np.asarray(a, np.float32) * np.float32(factor)
    if not shared:
        return a
    return g.weight(key, np.array(a, np.float32), shape=shape, dynamic=True)


def _vec(g: Graph, w: dict, key: str, layer: int, shared: bool, factor: float | None = None, axis: int = 1):
    """A per-channel vector (norm weight, bias) as :func:`_param` gives it, shaped for ``axis`` of a
    ``[1, C, H, S]`` tensor when shared."""
    n = np.shape(w[f"layers.{layer}.{key}"])[0]
    return _param(g, w, key, layer, shared, (1, n, 1, 1) if axis == 1 else (1, 1, n, 1), factor)


def _lin(g: Graph, x, w: dict, key: str, layer: int, lora, bias: str | None = None, acts=None,
         gain: float = 1.0, shared: bool = False, taps=None):
    """``W x (+ b)`` for ``layers.{layer}.{key}`` (plus its LoRA branch when ``lora`` has slots for it);
    ``acts`` (W8A8: :class:`orion.quant.activations.ActivationScales`) quantizes ``x`` to int8 first;
    ``gain``: the factor ``x`` already carries (the residual scale), which the int8 step scales by too;
    ``shared``: weights as program inputs named by ``key`` (see :func:`_param`)."""
    name = f"layers.{layer}.{key}"
    b = _vec(g, w, bias, layer, shared) if bias else None
    _tap(taps, f"input:{name}", x)
    if acts is not None:
        x = acts.graph_input(x, name, gain=gain)
    if shared:
        return graph_linear(g, x, key, _param(g, w, key, layer, True), b, slots=lora, canonical=name)
    return graph_linear(g, x, f"{key}_{layer}", w[name], b, slots=lora, canonical=name)


def _scaled(x, fp: Fp16Plan):
    """``fp.scale · x``: where a sublayer takes the residual scale, BEFORE the projection that writes into
    the stream - a product scaled afterwards has already overflowed fp16 (bf16 models' "massive
    activations" reach 2e5-6e5 at one projection). Every linear after it (and a LoRA branch ``B(A x)``)
    is linear, so the sublayer's output arrives scaled. Exact (a power of two) unless a value drops below
    fp16's normal range (2^-14 / scale): only values too small to matter next to the stream lose bits."""
    return x if fp.scale == 1.0 else ops.mul(x, float(fp.scale))


def _norm(cfg, x, weight, fp: Fp16Plan):
    """RMSNorm of the residual stream, which carries ``fp.scale`` times its true value (so eps is scaled
    by ``fp.scale**2``: the result is the same); stable norms where the sum of squares would leave fp16
    (see :mod:`orion.models.fp16_safety`)."""
    return ops.rms_norm(x, weight, eps=cfg.norm_eps * fp.scale * fp.scale, stable=fp.stable_norms)


def _head_norm(x, weight, n_heads: int, eps: float):
    """Per-head RMSNorm over head_dim (Qwen 3 / Gemma 3 q/k norms) on ``[1, heads * hd, 1, S]``."""
    d, s = x.shape[1], x.shape[3]
    h = ops.rms_norm(ops.reshape(x, (1, n_heads, d // n_heads, s)), weight, eps=eps, axis=2)
    return ops.reshape(h, (1, d, 1, s))


def _qkv(g: Graph, cfg, w: dict, layer: int, x, cos, sin, lora, fp: Fp16Plan, acts=None, shared: bool = False,
         taps=None):
    h = _norm(cfg, x, _vec(g, w, "rms_att", layer, shared), fp)
    bias = cfg.qkv_bias
    q = _lin(g, h, w, "wq", layer, lora, "bq" if bias else None, acts, shared=shared, taps=taps)
    k = _lin(g, h, w, "wk", layer, lora, "bk" if bias else None, acts, shared=shared, taps=taps)
    v = _lin(g, h, w, "wv", layer, lora, "bv" if bias else None, acts, shared=shared, taps=taps)
    if cfg.qk_norm:
        q = _head_norm(q, _vec(g, w, "q_norm", layer, shared, axis=2), cfg.n_heads, cfg.norm_eps)
        k = _head_norm(k, _vec(g, w, "k_norm", layer, shared, axis=2), cfg.n_kv_heads, cfg.norm_eps)
    q = ops.rope(q, cfg.n_heads, cos=cos, sin=sin, layout="adjacent")
    k = ops.rope(k, cfg.n_kv_heads, cos=cos, sin=sin, layout="adjacent")
    return q, k, v


def _residual(g: Graph, cfg, w: dict, layer: int, x, y, post: str, fp: Fp16Plan, shared: bool = False):
    """``x + y`` for a sublayer output ``y`` that already carries the residual scale (:func:`_scaled`);
    Gemma's sandwich norm (scale-invariant once its eps is scaled by scale²) takes the scale into its
    weight."""
    if cfg.sandwich_norms:
        weight = _vec(g, w, post, layer, shared, factor=fp.scale)
        return ops.add(x, ops.rms_norm(y, weight, eps=cfg.norm_eps * fp.scale * fp.scale, stable=fp.stable_norms))
    return ops.add(x, y)


def _tap(taps, kind: str, *values):
    """Records graph values for a caller that evaluates the definition on the host (the fp16 probe, W8A8
    calibration): ``taps[kind]`` lists them (see :func:`stage_graph`)."""
    if taps is not None:
        taps.setdefault(kind, []).extend(values)


def _attn(g: Graph, cfg, w: dict, layer: int, x, q, kc, vc, mask, lora, fp: Fp16Plan, acts=None,
          regions: bool = False, shared: bool = False, taps=None):
    attention = ops.region_attention if regions else ops.causal_attention
    a = attention(q, kc, vc, cfg.n_heads, cfg.n_kv_heads, mask=mask, scale=cfg.query_scale)
    o = _lin(g, _scaled(a, fp), w, "wo", layer, lora, acts=acts, gain=fp.scale, shared=shared, taps=taps)
    _tap(taps, "branch", o)
    x = _residual(g, cfg, w, layer, x, o, "rms_att_post", fp, shared)
    _tap(taps, "stream", x)
    return x


def _ffn(g: Graph, cfg, w: dict, layer: int, x, lora, fp: Fp16Plan, acts=None, shared: bool = False, taps=None):
    p = f"layers.{layer}."
    h = _norm(cfg, x, _vec(g, w, "rms_ffn", layer, shared), fp)
    if lora is None and acts is None and cfg.mlp_act == "silu" and fp.scale == 1.0 and not shared and taps is None:
        f = ops.swiglu_ffn(h, g.weight(f"w1_{layer}", w[p + "w1"]), g.weight(f"w2_{layer}", w[p + "w2"]),
                           g.weight(f"w3_{layer}", w[p + "w3"]))
    else:           # the same gated MLP, each linear possibly with an adapter / W8A8
        act = ops.silu if cfg.mlp_act == "silu" else ops.gelu
        # the scale on the up branch: before act·up can overflow
        up = _scaled(_lin(g, h, w, "w3", layer, lora, acts=acts, shared=shared, taps=taps), fp)
        gate = ops.mul(act(_lin(g, h, w, "w1", layer, lora, acts=acts, shared=shared, taps=taps)), up)
        f = _lin(g, gate, w, "w2", layer, lora, acts=acts, gain=fp.scale, shared=shared, taps=taps)
        _tap(taps, "branch", up, gate, f)
    x = _residual(g, cfg, w, layer, x, f, "rms_ffn_post", fp, shared)
    _tap(taps, "stream", x)
    return x


PARTS = ("attn", "ffn", "qkv", "body")
# How the engine cuts a stage too big for one program (C18), coarsest first: the first split whose
# every part compiles. Fewer programs per stage, fewer evals per token (int8 linears carry three weight
# tensors each: a stage's 21 fit as body + qkv, 12 and 9).
SPLITS = (("body", "qkv"), ("attn", "ffn", "qkv"))


def stage_graph(cfg, w: dict, stage: int, S: int, T: int, lora=None, fp16: Fp16Plan | None = None,
                part: str | None = None, activations=None, regions: bool = False, shared: bool = False,
                taps: dict | None = None) -> Graph:
    """Stage ``stage``'s graph; ``lora``: an :class:`orion.lora.AdapterSlots` giving the linears that get
    adapter inputs (``<weight>_lora_a`` / ``_lora_b``, see :func:`orion.lora.graph_linear`);
    ``fp16``: how the programs stay inside fp16 (residual scale, stable norms; default: plain).

    ``part`` cuts a stage that holds too many weights for one program (C18: Gemma's norms, Qwen's biases)
    into the programs of one of :data:`SPLITS` run in turn, each taking the previous one's residual as
    ``x``: "attn" (attention of layer ``stage - 1`` up to its residual add, output ``x_mid``), "ffn" (its
    MLP, output ``x_out``, or ``h`` after the final norm at the last stage), "body" (both in one program)
    and "qkv" (layer ``stage``'s projections); None is the whole stage. ``activations``: W8A8 (experimental), an
    :class:`orion.quant.activations.ActivationScales`: each linear it names gets its input quantized to
    int8 and dequantized (``quantize`` -> ``dequantize``) with the static scale.

    ``regions`` (batched decode, :mod:`orion.models.batch`): the caches hold one region of T positions per
    query column (``k_cache`` and ``v_cache [1, S * n_kv_heads, T, hd]``) and column i
    attends only to region i (``ops.region_attention``).

    ``shared``: each layer tensor is a program input named by its key (``wq``, ``rms_ffn``, ...), so the
    graph of a middle stage (0 < stage < L) is the same for every layer - one program that every middle
    stage runs, its dynamic weights that layer's values (:class:`orion.models.stages.LayerStage` binds
    them before each eval); the first or last stage takes this form when no split of it fits C18.

    ``taps``: a dict that receives graph values to evaluate on the host (:mod:`orion.models.host_run`):
    ``"stream"`` the residual after each sublayer, ``"branch"`` the values the residual scale carries,
    ``"input:<canonical linear name>"`` each linear's input (W8A8 calibration)."""
    if part is not None and (part not in PARTS or (stage == 0 and part != "qkv") or
                             (stage == cfg.n_layers and part == "qkv")):
        raise ValueError(f"stage {stage} has no part {part!r} (parts: {PARTS})")
    if shared and (part is not None or activations is not None):
        raise ValueError("a stage with weights as inputs is a whole stage without W8A8 activation scales")
    whole, fp = part is None, fp16 or Fp16Plan()
    d, L, kv, hd = cfg.d_model, cfg.n_layers, cfg.kv_dim, cfg.head_dim
    g = Graph(("llama_shared" if shared else f"llama_s{stage}") + f"_S{S}_T{T}" + ("_regions" if regions else "") +
              (f"_{part}" if part else ""))
    x = g.input("x", (1, d, 1, S))
    if stage > 0 and part in (None, "attn", "body"):
        q = g.input("q_attn", (1, cfg.q_dim, 1, S))
        rows = S * cfg.n_kv_heads
        kc = g.input("k_cache", (1, rows, T, hd) if regions else (1, kv, 1, T))
        vc = g.input("v_cache", (1, rows, T, hd) if regions else (1, kv, 1, T))
        mask = g.input("mask", (1, 1, S, T))
        x = _attn(g, cfg, w, stage - 1, x, q, kc, vc, mask, lora, fp, activations, regions, shared, taps)
        if part == "attn":
            g.output("x_mid", x)
            return g
    if stage > 0 and part in (None, "ffn", "body"):
        x = _ffn(g, cfg, w, stage - 1, x, lora, fp, activations, shared, taps)
        if stage == L:
            g.output("h", _norm(cfg, x, w["rms_final"], fp))
            return g
        g.output("x_out", x)
        if not whole:
            return g
    cos = g.input("cos", (1, hd // 2, 1, S))
    sin = g.input("sin", (1, hd // 2, 1, S))
    q, k, v = _qkv(g, cfg, w, stage, x, cos, sin, lora, fp, activations, shared, taps)
    g.output("q", q)
    g.output("k", k)
    g.output("v", v)
    return g
