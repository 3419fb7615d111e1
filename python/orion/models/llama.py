"""Llama and its descendants (llama2.c "Stories", Llama 3, SmolLM, Qwen 2.5/3, Mistral, Gemma 3, Phi-3) as
ANE programs; the variants' switches are fields of ``LlamaConfig``.

The decoder block is written once here - :func:`qkv`, :func:`attention`, :func:`mlp` and the residual
adds - over a view of the layer's tensors (:mod:`orion.models.layer_params`: baked per layer, program
inputs shared by every layer, or the training programs'). Every program and host evaluation of a Llama
is cut from it: the inference stages below, the training forward programs (:mod:`orion.train.programs`,
which output the intermediate values its hand-written backward needs), and the float64 host runs of the
fp16 probe, W8A8 calibration and the sample after training (:mod:`orion.models.host_run`). The
independent oracles (transformers fixtures, ``models/reference.py``, the float64 training tape) are not.

Same staging as :mod:`orion.models.gpt2`: stage 0 = RMSNorm → Wq/Wk/Wv + RoPE of layer 0; stage ``l`` =
attention of layer ``l-1`` over the KV cache (a program input; grouped-query heads broadcast) + Wo +
residual + RMSNorm + SwiGLU + residual, then the next layer's projections; stage L ends with the final
RMSNorm. RoPE uses llama2.c's adjacent-pair layout (HF rotate-half checkpoints are un-permuted by the
loader) with cos/sin tables passed as inputs so the same program serves every position.

Stage I/O (S query columns, T cache length, d = dim, kv = n_kv_heads * head_dim, hd = head_dim):
  inputs  ``x [1,d,1,S]``; stages < L: ``cos``/``sin [1,hd/2,1,S]`` (this stage's layer's RoPE);
          stages >= 1: ``q_attn [1,q,1,S]`` (q = n_heads * hd),
          ``k_cache``/``v_cache [1,kv,1,T]`` (batched decode: both ``[1,S*n_kv_heads,T,hd]``; stages with
          weights as inputs, ``shared=True``: one input ``kv_cache``, the keys then the values on axis 1),
          ``mask [1,1,S,T]`` (full or sliding, by the layer's type)
  outputs stages < L: ``q [1,q,1,S]``, ``k``/``v [1,kv,1,S]`` (q, k rotated); stages >= 1 also ``x_out``;
          stage L: ``h [1,d,1,S]``
"""

from __future__ import annotations

import numpy as np

from ..ir import Graph, ops
from .fp16_plan import Fp16Plan
from .layer_params import BakedLayer, layer_view
from .stages import KV_INPUT

__all__ = ["stage_graph", "embed", "classifier_weight", "rope_tables", "n_stages", "qkv", "attention", "mlp",
           "USES_ROPE", "QKV_FUSED", "SHARED_STAGES"]

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


def _lin(g: Graph, x, lw, key: str, bias: str | None = None, acts=None, gain: float = 1.0, taps=None):
    """``W x (+ b)`` for the layer's linear ``key`` as the view ``lw`` gives it (baked, an input, plus its
    LoRA branch when the view has a slot for it); ``acts`` (W8A8: :class:`orion.quant.activations.ActivationScales`)
    quantizes ``x`` to int8 first; ``gain``: the factor ``x`` already carries (the residual scale), which the
    int8 step scales by too."""
    name = lw.canonical(key)
    _tap(taps, f"input:{name}", x)
    if acts is not None:
        s = acts.input_scale(name, gain)
        x = ops.dequantize(ops.quantize(x, s, "int8"), s)
    return lw.linear(g, x, key, bias)


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


def _head_norm(x, weight, n_heads: int, eps: float, stable: bool):
    """Per-head RMSNorm over head_dim (Qwen 3 / Gemma 3 q/k norms) on ``[1, heads * hd, 1, S]``."""
    d, s = x.shape[1], x.shape[3]
    h = ops.rms_norm(ops.reshape(x, (1, n_heads, d // n_heads, s)), weight, eps=eps, axis=2, stable=stable)
    return ops.reshape(h, (1, d, 1, s))


def qkv(g: Graph, cfg, lw, x, cos, sin, fp: Fp16Plan, acts=None, taps=None) -> dict:
    """The attention sublayer up to its cache entries: ``xn`` (normed input), the projections ``ql``/``kl``
    (before the q/k norms), ``q``/``k`` (normed and rotated) and ``v``."""
    xn = _norm(cfg, x, lw.vec(g, "rms_att"), fp)
    bias = cfg.qkv_bias
    ql = _lin(g, xn, lw, "wq", "bq" if bias else None, acts, taps=taps)
    kl = _lin(g, xn, lw, "wk", "bk" if bias else None, acts, taps=taps)
    v = _lin(g, xn, lw, "wv", "bv" if bias else None, acts, taps=taps)
    q, k = ql, kl
    if cfg.qk_norm:
        q = _head_norm(q, lw.vec(g, "q_norm", axis=2), cfg.n_heads, cfg.norm_eps, fp.stable_norms)
        k = _head_norm(k, lw.vec(g, "k_norm", axis=2), cfg.n_kv_heads, cfg.norm_eps, fp.stable_norms)
    q = ops.rope(q, cfg.n_heads, cos=cos, sin=sin, layout="adjacent")
    k = ops.rope(k, cfg.n_kv_heads, cos=cos, sin=sin, layout="adjacent")
    return {"xn": xn, "ql": ql, "kl": kl, "q": q, "k": k, "v": v}


def attention(g: Graph, cfg, lw, q, kc, vc, mask, fp: Fp16Plan, acts=None, regions: bool = False,
              clamp: float | None = None, taps=None) -> dict:
    """The attention sublayer from its queries and keys/values (a KV cache, or the sequence's own) to the
    value it adds to the stream: ``att`` (the heads' output, unscaled) and ``o`` (Wo of it, carrying the
    residual scale). ``clamp``: the attention scores' clip (:func:`orion.ops.causal_attention`)."""
    if regions:
        a = ops.region_attention(q, kc, vc, cfg.n_heads, cfg.n_kv_heads, mask=mask, scale=cfg.query_scale)
    else:
        a = ops.causal_attention(q, kc, vc, cfg.n_heads, cfg.n_kv_heads, mask=mask, scale=cfg.query_scale,
                                 clamp=clamp)
    o = _lin(g, _scaled(a, fp), lw, "wo", acts=acts, gain=fp.scale, taps=taps)
    _tap(taps, "branch", o)
    return {"att": a, "o": o}


def mlp(g: Graph, cfg, lw, x, fp: Fp16Plan, acts=None, taps=None, parts: bool = False) -> dict:
    """The gated MLP sublayer (SwiGLU, or GeGLU with tanh GELU): ``xn`` (normed input), ``h1``/``h3`` (gate
    and up projections, unscaled), ``g`` (act(h1)·s·h3) and ``f`` (W2 g, carrying the residual scale).
    Without LoRA, W8A8, residual scale, shared weights and ``parts`` (every value but ``f`` wanted) a plain
    SwiGLU is the fused composite (``f`` only)."""
    xn = _norm(cfg, x, lw.vec(g, "rms_ffn"), fp)
    if (not parts and lw.lora is None and acts is None and cfg.mlp_act == "silu" and fp.scale == 1.0 and
            taps is None and isinstance(lw, BakedLayer)):
        ws = {k: g.weight(f"{k}_{lw.layer}", lw.array(k)) for k in ("w1", "w2", "w3")}
        return {"xn": xn, "f": ops.swiglu_ffn(xn, ws["w1"], ws["w2"], ws["w3"])}
    act = ops.silu if cfg.mlp_act == "silu" else ops.gelu
    h3 = _lin(g, xn, lw, "w3", acts=acts, taps=taps)
    up = _scaled(h3, fp)                                 # the scale on the up branch: before act·up can overflow
    h1 = _lin(g, xn, lw, "w1", acts=acts, taps=taps)
    gate = ops.mul(act(h1), up)
    f = _lin(g, gate, lw, "w2", acts=acts, gain=fp.scale, taps=taps)
    _tap(taps, "branch", up, gate, f)
    return {"xn": xn, "h1": h1, "h3": h3, "g": gate, "f": f}


def _residual(g: Graph, cfg, lw, x, y, post: str, fp: Fp16Plan, taps=None):
    """``x + y`` for a sublayer output ``y`` that already carries the residual scale (:func:`_scaled`);
    Gemma's sandwich norm (scale-invariant once its eps is scaled by scale²) takes the scale into its
    weight."""
    if cfg.sandwich_norms:
        weight = lw.vec(g, post, factor=fp.scale)
        y = ops.rms_norm(y, weight, eps=cfg.norm_eps * fp.scale * fp.scale, stable=fp.stable_norms)
    x = ops.add(x, y)
    _tap(taps, "stream", x)
    return x


def _tap(taps, kind: str, *values):
    """Records graph values for a caller that evaluates the definition on the host (the fp16 probe, W8A8
    calibration): ``taps[kind]`` lists them (see :func:`stage_graph`)."""
    if taps is not None:
        taps.setdefault(kind, []).extend(values)


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
        shape = (1, rows, T, hd) if regions else (1, kv, 1, T)
        if shared:          # both caches in one input: one C12-sized surface per layer, not two
            kvc = g.input(KV_INPUT, (1, 2 * shape[1]) + shape[2:])
            kc = ops.slice_by_size(kvc, (0, 0, 0, 0), shape)
            vc = ops.slice_by_size(kvc, (0, shape[1], 0, 0), shape)
        else:
            kc, vc = g.input("k_cache", shape), g.input("v_cache", shape)
        mask = g.input("mask", (1, 1, S, T))
        lw = layer_view(w, stage - 1, lora, shared)
        o = attention(g, cfg, lw, q, kc, vc, mask, fp, activations, regions, taps=taps)["o"]
        x = _residual(g, cfg, lw, x, o, "rms_att_post", fp, taps)
        if part == "attn":
            g.output("x_mid", x)
            return g
    if stage > 0 and part in (None, "ffn", "body"):
        lw = layer_view(w, stage - 1, lora, shared)
        x = _residual(g, cfg, lw, x, mlp(g, cfg, lw, x, fp, activations, taps)["f"], "rms_ffn_post", fp, taps)
        if stage == L:
            g.output("h", _norm(cfg, x, w["rms_final"], fp))
            return g
        g.output("x_out", x)
        if not whole:
            return g
    cos = g.input("cos", (1, hd // 2, 1, S))
    sin = g.input("sin", (1, hd // 2, 1, S))
    t = qkv(g, cfg, layer_view(w, stage, lora, shared), x, cos, sin, fp, activations, taps)
    for name in ("q", "k", "v"):
        g.output(name, t[name])
    return g
