"""Per-layer device programs of a training step for every Llama-style family, built with the graph compiler.

Four programs per layer, on ``[1, C, 1, S]`` fp16 tensors, every result a NAMED output (the runtime binds
by name, so the alphabetical slot order (C03) can never swap them, as it did upstream):

``attn_fwd``  the decoder definition's attention sublayer (:func:`orion.models.llama.qkv` + ``attention``)
              over the sequence itself, causal (or sliding-window) with the score clamp; outputs ``xn``
              (normed input), ``q``/``k`` (after RoPE), ``v``, ``att`` (pre-Wo), ``o``, and with q/k norms
              ``ql``/``kl`` (the projections before the norm)
``ffn_fwd``   the definition's MLP (:func:`orion.models.llama.mlp`, SwiGLU or GeGLU); outputs ``xn``, ``h1``,
              ``h3``, ``g``, ``f``
``attn_bwd``  (dout, q, k, v[, ql, kl]) → da = Woᵀ dout → recomputed P → dV, dP, dS → dQ, dK → inverse
              RoPE → (q/k norm backward) → outputs ``dq``/``dk`` (at Wq/Wk's outputs), ``dv``,
              ``dxn = Wqᵀdq + Wkᵀdk + Wvᵀdv`` and with q/k norms ``gqn``/``gkn`` (dy·x̂, summed on the CPU into
              the norm weights' gradients)
``ffn_bwd``   (df, h1, h3) → dg = W2ᵀ df → SwiGLU / GeGLU backward → outputs ``dh1``, ``dh3``, ``dxn``

The rest of each feature runs on the CPU (step.py): embedding scale, Gemma's sandwich norms on the
sublayer outputs, final soft-capping, bias gradients (row sums of dq/dk/dv).

Weight gradients (dW = dY·Xᵀ, ``[out, in]``) and the RMSNorm backward run on the CPU (step.py).

Weight-update strategies (:mod:`orion.weight_updates`):

* ``dynamic``   weights are program inputs: four programs compiled once and shared by all layers (the
                attention pair once per window/RoPE variant: Gemma 3's sliding and global layers); each
                layer's current weights are staged into the input surfaces right before that layer's
                evals (a version counter makes a stale surface impossible). 0 compiles / loads per step.
                Each linear is one ``matmul(W, x)`` on the weight surface as stored (``[out, in]``);
                the backward's Wᵀ·dy is the same surface with ``transpose_x`` — no transposed host
                copies (maderix's [1, IC, 1, OC] idiom needs two activation transposes per linear).
* ``recompile`` weights are baked consts: 4·L programs, all recompiled after every optimizer step;
                the compile budget (C05) is checked *before* any recompile — :class:`BudgetExhausted`
                tells the trainer to checkpoint and stop.
* ``delta``     baked programs updated with the runtime's delta primitive — only when ``orion doctor``
                verified it on this machine (otherwise :class:`StrategyUnavailable`).

LoRA fine-tuning (``lora=`` an :class:`orion.lora.Adapter`): the base weights are baked and frozen — 4·L
programs compiled once — and every adapted linear gets its A ``[r, in]`` and ``scale·B`` ``[out, r]`` as
program inputs (forward ``W x + B(A x)``, backward ``Wᵀ dy + Aᵀ(Bᵀ dy)``, :func:`orion.ops.lora_branch`);
after each optimizer step the new adapters are written into the surfaces: 0 compiles / loads per step.
"""

from __future__ import annotations

import time

import numpy as np

from .. import _native
from ..compiler.driver import compile as compile_graph
from ..compiler.driver import lower
from ..ir import Graph, ops
from ..ir.composites import MASK_VALUE, causal_mask
from ..ir.npmath import GELU_C, GELU_CUBIC
from ..models import llama
from ..models.config import LlamaConfig
from ..models.fp16_safety import Fp16Plan
from ..native import weight_updates
from ..native.convert import to_fp16
from ..native.runtime import resolve_device
from ..native.weight_updates import verified_delta
from ..quant import QuantizedArray
from .errors import StrategyUnavailable, TrainError

KINDS = ("attn_fwd", "ffn_fwd", "attn_bwd", "ffn_bwd")
# LoRA runs on models up to this depth bake the frozen base into 4 programs per layer (convs: the ANE's
# fastest linear, C46); deeper ones share the dynamic strategy's programs (C05: 4·L compiles would not fit)
LORA_BAKED_LAYERS = 8
STRATEGIES = ("dynamic", "recompile", "delta")
SCORE_CLAMP = 4096.0       # |scores| beyond this are saturated softmax inputs anyway; < 1e4/2 keeps the mask dominant
NORM_TINY = 2.0 ** -14      # floor of the RMSNorm prescale (1/NORM_TINY stays finite in fp16)

# which outputs go to the CPU for dW (fp32 surfaces, converted natively) vs back to the device (fp16)
_FP32_OUT = {"attn_fwd": ("xn", "att", "o"), "ffn_fwd": ("xn", "g", "f"),
             "attn_bwd": ("dq", "dk", "dv", "dxn", "gqn", "gkn"), "ffn_bwd": ("dh1", "dh3", "dxn")}
# forward outputs that carry the residual scale (build_graph): the step engine divides them by it
SCALED_OUTPUTS = {"attn_fwd": ("o",), "ffn_fwd": ("g", "f")}
GELU_CLIP = 20.0            # |x| beyond it: tanh(GELU_C(x + 0.044715x^3)) is +-1 in fp16; keeps x^3 finite


class BudgetExhausted(TrainError):
    """The next weight update would exceed the per-process compile budget (C05)."""


# ------------------------------------------------------------------------------------ graph pieces
def _per_head(t, heads: int):
    d, s = t.shape[1], t.shape[3]
    return ops.reshape(t, (1, heads, d // heads, s))


def head_norm_backward(x, weight, dy, heads: int, eps: float, stable: bool = True):
    """(dx, dy*x̂) of y = x̂·w, x̂ = x·r per head: dx = r(dy·w - x̂·mean(dy·w·x̂)); the second is summed
    over heads and positions on the CPU into the weight's gradient."""
    xh, dyh = _per_head(x, heads), _per_head(dy, heads)
    hd = xh.shape[2]
    r = ops.inv_rms(xh, eps, 2, stable)                     # the forward's (models.llama's head norm)
    xhat = ops.mul(xh, r)
    dxh = ops.mul(dyh, ops.reshape(weight, (1, 1, hd, 1)))
    m = ops.mul(ops.reduce_sum(ops.mul(dxh, xhat), [2]), 1.0 / hd)
    dx = ops.mul(r, ops.sub(dxh, ops.mul(xhat, m)))
    return ops.reshape(dx, tuple(x.shape)), ops.reshape(ops.mul(dyh, xhat), tuple(x.shape))


def gelu_backward(h, dg):
    """d/dh of the tanh-approximated GELU times ``dg``, and the GELU itself: with u = c(h + 0.044715h^3),
    t = tanh(u): gelu = h(1+t)/2, gelu' = (1+t)/2 + h(1-t^2)c(1 + 3·0.044715h^2)/2 (h clipped inside the
    polynomial, where t is saturated anyway, so h^3 stays finite in fp16)."""
    hc = ops.clip(h, -GELU_CLIP, GELU_CLIP)
    h2 = ops.mul(hc, hc)
    t = ops.tanh(ops.mul(ops.mul(hc, ops.add(ops.mul(h2, GELU_CUBIC), 1.0)), GELU_C))
    one_t = ops.add(t, 1.0)
    gelu = ops.mul(ops.mul(h, one_t), 0.5)
    dt = ops.mul(ops.mul(hc, ops.sub(1.0, ops.mul(t, t))), ops.mul(ops.add(ops.mul(h2, 3 * GELU_CUBIC), 1.0),
                                                                    0.5 * GELU_C))
    return ops.mul(dg, ops.add(ops.mul(one_t, 0.5), dt)), gelu


def _heads(t, n_heads: int, n_kv: int, hd: int, s: int, kv: bool):
    g = n_heads // n_kv
    if g == 1:
        return ops.reshape(t, (1, n_heads, hd, s))
    return ops.reshape(t, (1, n_kv, 1, hd, s) if kv else (1, n_kv, g, hd, s))


def attention_mask(s: int, window: int | None) -> np.ndarray:
    """Additive ``[1, 1, s, s]``: key j visible to query i iff i - window < j <= i (no window: j <= i)."""
    m = causal_mask(s)
    if window is not None:
        i, j = np.arange(s)[:, None], np.arange(s)[None, :]
        m = np.where(j <= i - window, np.float32(MASK_VALUE), m).astype(np.float32)
    return m


def _probs(qh, kh, scale: float, s: int, rank5: bool, clamp: float | None, mask):
    """Softmax of the masked scores; ``mask``: :func:`attention_mask`'s array, or a graph value of it."""
    scores = ops.matmul(ops.mul(qh, scale), kh, transpose_x=True)                       # [.., Sq, Skv]
    if clamp:
        scores = ops.clip(scores, -clamp, clamp)                                        # inf -> +-clamp, NaN stays
    shape = (1, 1, 1, s, s) if rank5 else (1, 1, s, s)
    mask = ops.as_value(mask.reshape(shape), scores) if isinstance(mask, np.ndarray) else ops.reshape(mask, shape)
    scores = ops.add(scores, mask)
    return ops.softmax(scores, axis=-1)


def _rope(t, heads: int, cos, sin):
    return ops.rope(t, heads, cos=cos, sin=sin)


# ------------------------------------------------------------------------------------ graph builders
def layer_weights(kind: str, params: dict, layer: int) -> dict[str, np.ndarray]:
    """The graph weights of ``kind`` for ``layer``: the master arrays themselves, ``[out, in]`` (backward
    programs use them transposed inside the graph, never as a host-side transposed copy); the features'
    biases and q/k norms when the model has them."""
    p = f"layers.{layer}."

    def pick(*keys):
        return {k: params[p + k] for k in keys if p + k in params}
    if kind == "attn_fwd":
        return pick("rms_att", "wq", "wk", "wv", "wo", "bq", "bk", "bv", "q_norm", "k_norm")
    if kind == "ffn_fwd":
        return pick("rms_ffn", "w1", "w2", "w3")
    if kind == "attn_bwd":
        return pick("wo", "wq", "wk", "wv", "q_norm", "k_norm")
    if kind == "ffn_bwd":
        return pick("w1", "w2", "w3")
    raise ValueError(kind)


def attn_variant(cfg: LlamaConfig, layer: int) -> tuple:
    """What makes ``layer``'s attention programs differ from another layer's besides weights: its window
    (None: full causal) and its RoPE (Gemma 3's sliding layers have their own base)."""
    return (cfg.sliding_window if cfg.layer_sliding(layer) else None, cfg.layer_rope(layer))


def lean_baked(cfg: LlamaConfig, dynamic: bool) -> bool:
    """Baked programs of a model with q/k/v biases or q/k norms would hold more weight tensors than the
    ANE takes (C18/C19: the plain attention program is at the limit for small models, whose outputs each
    need a widening const): they take their vector weights (norms, biases) and their constant tables
    (RoPE, mask) as program inputs, set once (or staged by ``set_weights``) - the matrices stay baked."""
    return not dynamic and (cfg.qkv_bias or cfg.qk_norm)


def _linear(x, w, transpose: bool, dynamic: bool, lora=None):
    """``W·x`` (or ``Wᵀ·x``) for x [1, C, 1, S] and a weight ``w`` [out, in].

    Baked weights: a 1x1 conv (C46), the transpose constant-folded at compile time. Dynamic weights: one
    ``matmul(W, x)`` on the weight surface as is — ``transpose_x`` gives Wᵀ·x from the same surface, so
    no transposed copy is made on the host and no activation transposes run on the device.
    ``lora``: (A, B) program inputs of an adapter on this linear, added as ``B(A x)`` (``Aᵀ(Bᵀ x)``)."""
    if not dynamic:
        y = ops.linear(x, ops.transpose(w, (1, 0)) if transpose else w)
    else:
        y = ops.matmul_linear(x, w, transpose=transpose)
    if lora is not None:
        y = ops.add(y, ops.lora_branch(x, lora[0], lora[1], transpose=transpose))
    return y


class TrainingLayer:
    """The training programs' view of one layer (see :mod:`orion.models.layer_params`): the forward programs
    are the decoder definition's sublayers (:func:`orion.models.llama.qkv` / ``attention`` / ``mlp``) on it,
    the backward programs use its linears transposed. Weights are named by key; with ``dynamic`` the
    compiler makes each a program input (one program for every layer), otherwise baked (``lean``: the
    vectors as inputs, :func:`lean_baked`); ``lora``: ``{key: (A, scale·B)}`` as inputs ``<key>_lora_a/_b``."""

    def __init__(self, g: Graph, weights: dict, layer: int, dynamic: bool, lean: bool, lora: dict | None):
        self.g, self.weights, self.layer, self.dynamic, self.lean = g, weights, layer, dynamic, lean
        self.lora = lora or None
        self._made: dict = {}

    def canonical(self, key: str) -> str:
        return f"layers.{self.layer}.{key}"

    def has(self, key: str) -> bool:
        return key in self.weights

    def weight(self, key: str):
        if key not in self._made:
            arr = self.weights[key]
            # an orion.quant.QuantizedArray (a compressed LoRA base) stays one when baked; as a program input
            # it enters decoded (constexpr operands must be constants)
            dyn = self.lean and np.ndim(arr) == 1
            arr = np.asarray(arr, np.float32) if dyn else arr if isinstance(arr, QuantizedArray) else np.asarray(arr)
            shape = (1, arr.shape[0], 1, 1) if arr.ndim == 1 else None
            self._made[key] = self.g.weight(key, arr, shape=shape, dynamic=dyn)
        return self._made[key]

    def vec(self, g, key: str, factor: float | None = None, axis: int = 1):
        if factor is not None:
            raise TrainError("training keeps Gemma's sandwich norms on the CPU (step.py); no scaled vectors")
        return self.weight(key)

    def _adapter(self, key: str):
        if self.lora is None or key not in self.lora:
            return None
        name = f"{key}_lora_ab"
        if name not in self._made:
            a, b = self.lora[key]
            self._made[name] = (self.g.weight(f"{key}_lora_a", a, dynamic=True),
                                self.g.weight(f"{key}_lora_b", b, dynamic=True))
        return self._made[name]

    def linear(self, g, x, key: str, bias: str | None = None, transpose: bool = False):
        y = _linear(x, self.weight(key), transpose, self.dynamic, self._adapter(key))
        return ops.add(y, self.weight(bias)) if bias else y


def build_graph(kind: str, cfg: LlamaConfig, seq: int, weights: dict[str, np.ndarray], fixes: bool = True,
                dynamic: bool = False, lora: dict | None = None, layer: int = 0, residual_scale: float = 1.0) -> Graph:
    """One program's graph. ``dynamic``: the linear layers are written for weights passed as program
    inputs (compile with ``dynamic_weights=True``); otherwise for baked weights. ``fixes=False`` gives the
    unprotected fp16 variant (plain RMSNorm, no score clamp) used to demonstrate the overflow cascade.
    ``lora``: ``{weight: (A [r, in], scale·B [out, r])}`` — adapters as program inputs ``<weight>_lora_a`` /
    ``<weight>_lora_b`` (marked dynamic, so only they become inputs when the base is baked).
    ``layer``: whose window and RoPE the attention programs use (:func:`attn_variant`). ``residual_scale``: the
    factor s the host multiplies the residual stream ``x`` by before it enters (a power of two that keeps
    bf16-trained models' streams inside fp16, :mod:`orion.models.fp16_safety`); ``x`` only feeds the input
    RMSNorm, which gives the same result with eps·s². The sublayer outputs carry s too, entered before the
    projection that could overflow (as the inference stages do): ``o = Wo(s·att)``, ``g = act(h1)·(s·h3)``,
    ``f = W2 g`` - the host divides those three by s (:data:`SCALED_OUTPUTS`); ``att``, ``h1``, ``h3`` and
    every backward program are unscaled."""
    d, h, H, KV, hd, S = cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, seq
    qd, kvd = cfg.q_dim, cfg.kv_dim
    rank5 = H != KV
    clamp = SCORE_CLAMP if fixes else None
    window, rope = attn_variant(cfg, layer)
    ang = rope.angles(hd, np.arange(S))
    cos, sin = np.cos(ang).reshape(1, hd // 2, 1, S), np.sin(ang).reshape(1, hd // 2, 1, S)
    mask = attention_mask(S, window)
    scale, eps, qkn = cfg.query_scale, cfg.norm_eps, cfg.qk_norm
    g = Graph(kind)
    lean = lean_baked(cfg, dynamic)
    lw = TrainingLayer(g, weights, layer, dynamic, lean, lora)
    if lean and kind.startswith("attn"):
        cos, sin, mask = (g.weight(n, np.asarray(a, np.float32), dynamic=True)
                          for n, a in (("rope_cos", cos), ("rope_sin", sin), ("attn_mask", mask)))
    neg_sin = ops.mul(sin, -1.0) if lean and kind.startswith("attn") else -sin
    fp = Fp16Plan(scale=residual_scale, stable_norms=fixes)
    out32 = _FP32_OUT[kind]

    def lin(x, name, transpose=False):
        return lw.linear(g, x, name, transpose=transpose)

    def out(name, v):
        g.output(name, v, dtype="fp32" if name in out32 else None)

    if kind == "attn_fwd":                  # the definition's attention sublayer over the sequence itself
        t = llama.qkv(g, cfg, lw, g.input("x", (1, d, 1, S)), cos, sin, fp)
        t.update(llama.attention(g, cfg, lw, t["q"], t["k"], t["v"], mask, fp, clamp=clamp))
        for name in ("xn", "q", "k", "v", "att", "o") + (("ql", "kl") if qkn else ()):
            out(name, t[name])
    elif kind == "ffn_fwd":                 # the definition's MLP, every intermediate value the backward needs
        t = llama.mlp(g, cfg, lw, g.input("x", (1, d, 1, S)), fp, parts=True)
        for name in ("xn", "h1", "h3", "g", "f"):
            out(name, t[name])
    elif kind == "attn_bwd":
        dout = g.input("dout", (1, d, 1, S))
        q = g.input("q", (1, qd, 1, S))
        k = g.input("k", (1, kvd, 1, S))
        v = g.input("v", (1, kvd, 1, S))
        qh, kh, vh = _heads(q, H, KV, hd, S, False), _heads(k, H, KV, hd, S, True), _heads(v, H, KV, hd, S, True)
        p = _probs(qh, kh, scale, S, rank5, clamp, mask)
        dah = _heads(lin(dout, "wo", True), H, KV, hd, S, False)                 # da = Wo^T dout, [.., hd, Sq]
        dv = ops.matmul(dah, p)                                                  # dV[hd, j] = sum_i da[hd, i] P[i, j]
        dp = ops.matmul(dah, vh, transpose_x=True)                               # dP[i, j] = sum_hd da[hd, i] v[hd, j]
        ds = ops.mul(ops.mul(p, ops.sub(dp, ops.reduce_sum(ops.mul(p, dp), [-1]))), scale)
        dq = ops.matmul(kh, ds, transpose_y=True)                                 # dq[hd, i] = sum_j k[hd, j] dS[i, j]
        dk = ops.matmul(qh, ds)                                                  # dk[hd, j] = sum_i q[hd, i] dS[i, j]
        if rank5:
            dv, dk = ops.reduce_sum(dv, [2]), ops.reduce_sum(dk, [2])            # sum over the query group
        dq = _rope(ops.reshape(dq, (1, qd, 1, S)), H, cos, neg_sin)              # RoPE^T = rotation by -theta
        dk = _rope(ops.reshape(dk, (1, kvd, 1, S)), KV, cos, neg_sin)
        dv = ops.reshape(dv, (1, kvd, 1, S))
        norm_grads = []
        if qkn:                                                                  # back through the q/k norms
            dq, gqn = head_norm_backward(g.input("ql", (1, qd, 1, S)), lw.weight("q_norm"), dq, H, eps, fixes)
            dk, gkn = head_norm_backward(g.input("kl", (1, kvd, 1, S)), lw.weight("k_norm"), dk, KV, eps, fixes)
            norm_grads = [("gqn", gqn), ("gkn", gkn)]
        dxn = ops.add(ops.add(lin(dq, "wq", True), lin(dk, "wk", True)), lin(dv, "wv", True))
        for name, val in [("dq", dq), ("dk", dk), ("dv", dv), ("dxn", dxn)] + norm_grads:
            out(name, val)
    elif kind == "ffn_bwd":
        df = g.input("df", (1, d, 1, S))
        h1 = g.input("h1", (1, h, 1, S))
        h3 = g.input("h3", (1, h, 1, S))
        dg = lin(df, "w2", True)
        if cfg.mlp_act == "silu":
            sg = ops.sigmoid(h1)
            dh3 = ops.mul(dg, ops.mul(h1, sg))
            dh1 = ops.mul(ops.mul(dg, h3), ops.mul(sg, ops.add(ops.mul(h1, ops.sub(1.0, sg)), 1.0)))
        else:
            dh1, gelu = gelu_backward(h1, ops.mul(dg, h3))
            dh3 = ops.mul(dg, gelu)
        dxn = ops.add(lin(dh1, "w1", True), lin(dh3, "w3", True))
        for name, val in (("dh1", dh1), ("dh3", dh3), ("dxn", dxn)):
            out(name, val)
    else:
        raise ValueError(f"unknown program kind {kind!r}")
    return g


# ------------------------------------------------------------------------------------ budget
def compile_budget(device: str) -> tuple[int, int]:
    """(compiles used, limit) of the per-process compile budget on ``device`` (C05)."""
    return tuple(int(v) for v in _native.budget(device))


def _delta_allowed(device: str, verdict, profile=None) -> str:
    """The delta recipe `orion doctor` verified on this machine (its probe runs the same update code)."""
    method, why = verified_delta(device, profile, verdict)
    if method:
        return method
    raise StrategyUnavailable(f"strategy 'delta' is not available: {why}. On the ANE a rewrite+reload was measured "
                              f"to leave the old weights in place (C07); use --strategy dynamic (default) or "
                              f"recompile, or run `orion doctor` on this machine first")


# ------------------------------------------------------------------------------------ the program set
class LayerPrograms:
    """The device programs of every layer under one weight-update strategy.

    ``run(kind, layer, **inputs)`` evaluates ``kind`` with ``layer``'s current weights; ``update(params)``
    is called after every optimizer step. ``stats`` accumulates timings and counts by category.
    """

    def __init__(self, cfg: LlamaConfig, seq: int, params: dict, strategy: str = "dynamic", device: str = "sim",
                 fixes: bool = True, profile=None, doctor_verdict=None, lora=None, residual_scale: float = 1.0):
        if strategy not in STRATEGIES:
            raise TrainError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
        if lora is not None and strategy != "dynamic":
            raise TrainError(f"LoRA fine-tuning bakes the frozen base weights and passes the adapters as program "
                             f"inputs; strategy {strategy!r} does not apply (use the default, dynamic)")
        self.cfg, self.seq, self.strategy, self.fixes, self.profile = cfg, seq, strategy, fixes, profile
        self.device = resolve_device(device)
        self.delta_method = _delta_allowed(self.device, doctor_verdict, profile) if strategy == "delta" else None
        self.params = params
        self.lora = lora
        self.residual_scale = float(residual_scale)        # the step engine scales the stream it feeds in
        self.version = 0
        self.stats = {"stage_s": 0.0, "update_s": 0.0, "eval_s": 0.0, "evals": 0, "stages": 0}
        self._progs: dict = {}
        self._staged: dict = {}
        self._graphs: dict = {}
        self._bound_io: dict = {}          # (program key, buffers key) -> BoundOutputs (run(..., buffers=))
        self._input_surfaces: dict = {}    # program key -> its activation-input surfaces (BoundOutputs)
        # dynamic: one program per kind and attention variant (window, RoPE), shared by the layers that have it
        variants = [attn_variant(cfg, i) for i in range(cfg.n_layers)]
        self._variant = [variants.index(v) for v in variants]
        # LoRA: a frozen baked base with the adapters as inputs, 4·L programs compiled once - or, deeper than
        # LORA_BAKED_LAYERS, the shared programs of the dynamic strategy with the adapters as inputs too
        self.lora_shared = lora is not None and cfg.n_layers > LORA_BAKED_LAYERS
        if lora is not None and not self.lora_shared:
            self._check_budget(len(KINDS) * cfg.n_layers, "compile the per-layer LoRA programs")
            for layer in range(cfg.n_layers):
                for kind in KINDS:
                    g = build_graph(kind, cfg, seq, layer_weights(kind, params, layer), fixes,
                                    lora=self._lora_values(kind, layer), layer=layer,
                                    residual_scale=self.residual_scale)
                    self._progs[(kind, layer)] = self._compile(g, dynamic=False)
                    self._staged[(kind, layer)] = self.version
        elif strategy == "dynamic":
            for kind in KINDS:
                for layer in range(cfg.n_layers):
                    key = self._key(kind, layer)
                    if key not in self._progs:
                        g = build_graph(kind, cfg, seq, layer_weights(kind, params, layer), fixes, dynamic=True,
                                        layer=layer, residual_scale=self.residual_scale,
                                        lora=self._lora_values(kind, layer) if lora is not None else None)
                        self._progs[key] = self._compile(g, dynamic=True)
                        self._staged[key] = (0, 0)
        else:
            self._check_budget(len(KINDS) * cfg.n_layers, "compile the per-layer programs")
            for layer in range(cfg.n_layers):
                for kind in KINDS:
                    g = build_graph(kind, cfg, seq, layer_weights(kind, params, layer), fixes, layer=layer,
                                    residual_scale=self.residual_scale)
                    self._graphs[(kind, layer)] = g
                    self._progs[(kind, layer)] = self._compile(g, dynamic=False)

    # -- compile -------------------------------------------------------------------------------
    def _compile(self, g: Graph, dynamic: bool):
        return compile_graph(g, device=self.device, dynamic_weights=True if dynamic else None, profile=self.profile)

    @property
    def n_programs(self) -> int:
        return len(self._progs)

    def compiles_per_update(self) -> int:
        return 0 if self.strategy == "dynamic" else len(KINDS) * self.cfg.n_layers

    @property
    def shared(self) -> bool:
        """One program per kind shared by every layer (dynamic base weights; a deep LoRA run's too)."""
        return self.strategy == "dynamic" and (self.lora is None or self.lora_shared)

    def _lora_values(self, kind: str, layer: int) -> dict:
        """``{weight: (A, scale·B)}`` of the adapted linears of ``kind`` in ``layer`` (the staged values)."""
        ad, out = self.lora, {}
        for key in layer_weights(kind, self.params, layer):
            name = f"layers.{layer}.{key}"
            if name in ad.A:
                out[key] = (ad.A[name], ad.B[name] * np.float32(ad.scale(name)))
        return out

    def _check_budget(self, need: int, what: str) -> None:
        used, limit = compile_budget(self.device)
        if used + need > limit:
            raise BudgetExhausted(f"the compile budget would run out: {what} needs {need} compiles, {used} of the "
                                  f"process's {limit} are used (C05)")

    # -- eval ----------------------------------------------------------------------------------
    def _key(self, kind: str, layer: int):
        """The program of ``kind`` that ``layer`` runs: shared programs are keyed by kind (+ attention variant
        when the layers differ in window or RoPE), the others by (kind, layer)."""
        if not self.shared:
            return (kind, layer)
        v = self._variant[layer] if kind.startswith("attn") else 0
        return kind if v == 0 else (kind, v)

    def program(self, kind: str, layer: int):
        return self._progs[self._key(kind, layer)]

    def run(self, kind: str, layer: int, buffers=None, **inputs) -> dict[str, np.ndarray]:
        """``kind``'s outputs for ``layer`` from ``inputs``. ``buffers``: a key (hashable) of output surfaces
        owned by (kind, buffers), allocated once and reused at every step: the outputs are views of them,
        valid until the next run of ``kind`` with the same key - no output copies, no fresh arrays (and pages)
        at every step. None: fresh arrays (the program's own run)."""
        if self.lora is not None and not self.lora_shared:
            if self._staged[(kind, layer)] != self.version:
                self._stage_lora(kind, layer)
        elif self.strategy == "dynamic" and self._staged[self._key(kind, layer)] != (layer, self.version):
            self._stage(kind, layer)
        prog = self.program(kind, layer)
        bound = None if buffers is None else self._bound(kind, layer, buffers)
        t = time.perf_counter()
        out = prog.run(inputs) if bound is None else bound.run(inputs, self._input_surfaces[self._key(kind, layer)])
        self.stats["eval_s"] += time.perf_counter() - t
        self.stats["evals"] += 1
        return out

    def _bound(self, kind: str, layer: int, buffers) -> BoundOutputs | None:
        key, prog = (self._key(kind, layer), buffers), self._key(kind, layer)
        if key not in self._bound_io:
            self._bound_io[key] = BoundOutputs.make(self._progs[prog], self._input_surfaces.setdefault(prog, {}))
        return self._bound_io[key]

    def _stage(self, kind: str, layer: int) -> None:
        """Writes ``layer``'s weights into the shared program's weight surfaces (no compile, no load)."""
        t = time.perf_counter()
        key = self._key(kind, layer)
        cp = self._progs[key]
        plan = cp.io_plan
        values = dict(layer_weights(kind, self.params, layer))
        if self.lora is not None:                       # a deep LoRA run: this layer's adapters too
            values.update(self._shared_lora_inputs(plan, kind, layer))
        for name, arr in values.items():
            dw = plan.dynamic[name]
            b = plan.inputs[dw.input_key]
            if tuple(b.shape) != tuple(dw.surface_shape):         # packed surfaces: the general path
                cp.set_weights(**{name: arr})
                continue
            cp.program.stage(b.mil_name, b.to_surface(dw.to_surface(np.asarray(arr, np.float32))))
        self._staged[key] = (layer, self.version)
        self.stats["stage_s"] += time.perf_counter() - t
        self.stats["stages"] += 1

    def _shared_lora_inputs(self, plan, kind: str, layer: int) -> dict:
        """``layer``'s A / scale·B for a shared program's adapter inputs (zeros where this layer has no
        adapter on a linear that the program has one on)."""
        have = self._lora_values(kind, layer)
        out, used = {}, set()
        for name, dw in plan.dynamic.items():
            if name.endswith("_lora_a") or name.endswith("_lora_b"):
                key, which = name[:-7], name[-1]
                ab = have.get(key)
                used.add(key)
                out[name] = np.zeros(dw.user_shape, np.float32) if ab is None else ab[0 if which == "a" else 1]
        if set(have) - used:
            raise TrainError(f"layer {layer} has adapters on {sorted(set(have) - used)} that the shared {kind} program "
                             f"has no inputs for: a deep LoRA run needs the same targets in every layer")
        return out

    def _stage_lora(self, kind: str, layer: int) -> None:
        """Writes the current adapters of ``layer`` into its ``kind`` program's A/B surfaces."""
        t = time.perf_counter()
        vals = {}
        for key, (a, b) in self._lora_values(kind, layer).items():
            vals[f"{key}_lora_a"], vals[f"{key}_lora_b"] = a, b
        if vals:
            self._progs[(kind, layer)].set_weights(**vals)
        self._staged[(kind, layer)] = self.version
        self.stats["stage_s"] += time.perf_counter() - t
        self.stats["stages"] += 1

    # -- weight updates ------------------------------------------------------------------------
    def update(self, params: dict | None = None) -> None:
        """New master weights are in ``params`` (updated in place by the optimizer, or a new dict). With
        LoRA the adapter arrays were updated in place; the base weights are frozen."""
        if params is not None and self.lora is None:
            self.params = params
        self.version += 1                     # every staged surface is now stale
        if self.strategy == "dynamic":
            return
        t = time.perf_counter()
        if self.strategy == "recompile":
            self._check_budget(self.compiles_per_update(), "the weight update after this step")
            for (kind, layer), cp in self._progs.items():
                cp.set_weights(**layer_weights(kind, self.params, layer))
        else:
            self._delta_update()
        self.stats["update_s"] += time.perf_counter() - t

    def _delta_update(self) -> None:
        for (kind, layer), cp in self._progs.items():
            g = self._graphs[(kind, layer)]
            inputs = {}
            for name, arr in layer_weights(kind, self.params, layer).items():
                if name in cp.io_plan.dynamic:              # lean programs' vector weights: staged, not baked
                    inputs[name] = arr
                    continue
                g.weights[name].node.attrs["value"] = np.asarray(arr, np.float32).reshape(g.weights[name].shape)
            if inputs:
                cp.set_weights(**inputs)
            args = {k: v for k, v in cp._recompile_args.items() if k in ("target",)}
            low = lower(g, **args)
            if low.mil != cp.mil:
                raise TrainError("delta update: the lowered program text changed; refusing a partial update")
            weight_updates.apply(cp.program, self.delta_method, low.weights)  # as `orion doctor` verified it

    def release(self) -> None:
        for cp in self._progs.values():
            cp.release()
        self._progs.clear()
        self._bound_io.clear()
        self._input_surfaces.clear()


class BoundOutputs:
    """One program's outputs in surfaces of their own, evaluated by a raw slot request (``eval_slots``):
    the outputs are numpy views of those surfaces (no copy out, no fresh array and pages at every eval).
    The activation inputs are written into ``inputs``, surfaces shared by every BoundOutputs of the program
    (each eval consumes them; fp32 converted to fp16 by the runtime's converter, as ``run`` does); the
    weight inputs are the program's own (staged) surfaces. The runtime requires one alloc size for all
    inputs (C12) and one for all outputs (C02): the program's own. Only for plans that map every user
    tensor 1:1 onto its MIL tensor (no padding, splitting or widening): :meth:`make` returns None otherwise."""

    def __init__(self, cp, ins: list, outs: dict, out_surfaces: list):
        self.cp, self.ins, self.outs, self.out_surfaces = cp, ins, outs, out_surfaces

    @classmethod
    def make(cls, cp, inputs: dict) -> BoundOutputs | None:
        """``inputs``: the program's activation-input surfaces {MIL name: (surface, view)}, filled on first use."""
        io, rt = cp.io_plan, cp.program
        by_mil = {b.mil_name: b for b in io.inputs.values()}
        ins = []
        for spec in rt.inputs:                                   # slot order
            b = by_mil.get(spec.name)
            if b is None:
                return None
            if b.kind != "activation":
                ins.append((spec.name, None))                    # staged weight: the program's own surface
                continue
            if tuple(b.mil_shape) != tuple(b.shape) or b.pad_axis is not None or b.mil_dtype not in _NP_DT:
                return None
            if spec.name not in inputs:
                surf = _native.Surface(rt.input_surface(spec.name).alloc_size)
                inputs[spec.name] = (surf, surf.view(b.mil_dtype, list(b.shape)))
            ins.append((spec.name, b))
        parts = {p.mil_name: (ob, p) for ob in io.outputs.values() for p in ob.parts}
        outs, surfaces = {}, []
        for spec in rt.outputs:
            ob, part = parts.get(spec.name, (None, None))
            if (ob is None or len(ob.parts) != 1 or part.unpad or tuple(part.mil_shape) != tuple(ob.shape)
                    or part.mil_dtype != ob.dtype or ob.dtype not in _NP_DT):
                return None
            surf = _native.Surface(rt.output_surface(spec.name).alloc_size)
            outs[ob.name] = surf.view(ob.dtype, list(ob.shape))
            surfaces.append(surf)
        return cls(cp, ins, outs, surfaces)

    def run(self, inputs: dict, surfaces: dict) -> dict[str, np.ndarray]:
        names = {b.name for _, b in self.ins if b is not None}
        if set(inputs) != names:
            raise TrainError(f"program inputs {sorted(inputs)} given, it takes {sorted(names)}")
        rt = self.cp.program                 # looked up at each run: a recompile (set_weights) replaces it
        slots = []
        for mil, b in self.ins:
            if b is None:
                slots.append(rt.input_surface(mil))
                continue
            surf, view = surfaces[mil]
            arr = inputs[b.name]
            if tuple(arr.shape) != tuple(b.shape):
                raise TrainError(f"input {b.name!r}: shape {list(arr.shape)}, the program takes {list(b.shape)}")
            if arr.dtype == np.float32 and view.dtype == np.float16:
                arr = to_fp16(arr)                                      # the runtime's fp32 -> fp16 (RNE)
            np.copyto(view, arr, casting="same_kind")
            slots.append(surf)
        rt.eval_slots(slots, self.out_surfaces)
        return dict(self.outs)


_NP_DT = {"fp16": np.float16, "fp32": np.float32}
