"""Per-layer device programs of a Llama training step, built with the graph compiler.

Four programs per layer, on ``[1, C, 1, S]`` fp16 tensors, every result a NAMED output (the runtime binds
by name, so the C03 slot order can never swap them — training-on-ane.md §4.1):

``attn_fwd``  x → RMSNorm → Wq/Wk/Wv → RoPE (llama2.c adjacent pairs) → causal attention → Wo
              outputs ``xn`` (normed input), ``q``/``k`` (after RoPE), ``v``, ``att`` (pre-Wo), ``o``
``ffn_fwd``   x → RMSNorm → W1/W3 → SwiGLU → W2; outputs ``xn``, ``h1``, ``h3``, ``g`` (gate), ``f``
``attn_bwd``  (dout, q, k, v) → da = Woᵀ dout → recomputed P → dV, dP, dS → dQ, dK → inverse RoPE →
              outputs ``dq``/``dk`` (pre-RoPE), ``dv`` and ``dxn = Wqᵀdq + Wkᵀdk + Wvᵀdv``
``ffn_bwd``   (df, h1, h3) → dg = W2ᵀ df → SwiGLU backward → outputs ``dh1``, ``dh3``, ``dxn``

Weight gradients (dW = dY·Xᵀ, ``[out, in]``) and the RMSNorm backward run on the CPU (step.py).

Weight-update strategies (training-on-ane.md §1):

* ``dynamic``   weights are program inputs: four programs compiled once and shared by all layers; each
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

import math
import time

import numpy as np

from ..ir import Graph, ops
from ..ir.composites import causal_mask, rope_tables
from .errors import StrategyUnavailable, TrainError
from .model import ModelConfig

KINDS = ("attn_fwd", "ffn_fwd", "attn_bwd", "ffn_bwd")
STRATEGIES = ("dynamic", "recompile", "delta")
SCORE_CLAMP = 4096.0       # |scores| beyond this are saturated softmax inputs anyway; < 1e4/2 keeps the mask dominant
NORM_TINY = 2.0 ** -14      # floor of the RMSNorm prescale (1/NORM_TINY stays finite in fp16)

# which outputs go to the CPU for dW (fp32 surfaces, converted natively) vs back to the device (fp16)
_FP32_OUT = {"attn_fwd": ("xn", "att", "o"), "ffn_fwd": ("xn", "g", "f"),
             "attn_bwd": ("dq", "dk", "dv", "dxn"), "ffn_bwd": ("dh1", "dh3", "dxn")}


class BudgetExhausted(TrainError):
    """The next weight update would exceed the per-process compile budget (C05)."""


# ------------------------------------------------------------------------------------ graph pieces
def rms_norm(x, weight, eps: float, stable: bool = True):
    """RMSNorm over channels. ``stable``: prescale by 1/max|x| so the sum of squares can never overflow
    fp16 (the plain composite overflows once the RMS exceeds ~256 and then returns zeros)."""
    if not stable:
        return ops.rms_norm(x, weight, eps)
    n = x.shape[1]
    m = ops.add(ops.relu(ops.reduce_max(x, [1])), ops.relu(ops.reduce_max(ops.mul(x, -1.0), [1])))   # >= max|x|
    inv = ops.pow(ops.add(m, NORM_TINY), -1.0)                                                        # <= 16384
    t = ops.mul(x, ops.mul(inv, 1.0 / math.sqrt(n)))                                                  # |t| <= 1/sqrt(n)
    ms = ops.reduce_sum(ops.mul(t, t), [1])                                                            # <= 1
    e = ops.mul(inv, math.sqrt(eps))                                                                   # <= 52
    r = ops.mul(inv, ops.pow(ops.add(ms, ops.mul(e, e)), -0.5))                           # 1/rms <= 1/sqrt(eps)
    return ops.mul(ops.mul(x, r), weight)


def _heads(t, n_heads: int, n_kv: int, hd: int, s: int, kv: bool):
    g = n_heads // n_kv
    if g == 1:
        return ops.reshape(t, (1, n_heads, hd, s))
    return ops.reshape(t, (1, n_kv, 1, hd, s) if kv else (1, n_kv, g, hd, s))


def _probs(qh, kh, hd: int, s: int, rank5: bool, clamp: float | None):
    scores = ops.matmul(ops.mul(qh, 1.0 / math.sqrt(hd)), kh, transpose_x=True)       # [.., Sq, Skv]
    if clamp:
        scores = ops.clip(scores, -clamp, clamp)                                        # inf -> +-clamp, NaN stays
    mask = causal_mask(s).reshape((1, 1, 1, s, s) if rank5 else (1, 1, s, s))
    scores = ops.add(scores, ops.as_value(mask, scores))
    return ops.softmax(scores, axis=-1)


def _rope(t, heads: int, cos, sin):
    return ops.rope(t, heads, cos=cos, sin=sin)


# ------------------------------------------------------------------------------------ graph builders
def layer_weights(kind: str, params: dict, layer: int) -> dict[str, np.ndarray]:
    """The graph weights of ``kind`` for ``layer``: the master arrays themselves, ``[out, in]`` (backward
    programs use them transposed inside the graph, never as a host-side transposed copy)."""
    p = f"layers.{layer}."
    if kind == "attn_fwd":
        return {"rms": params[p + "rms_att"], "wq": params[p + "wq"], "wk": params[p + "wk"],
                "wv": params[p + "wv"], "wo": params[p + "wo"]}
    if kind == "ffn_fwd":
        return {"rms": params[p + "rms_ffn"], "w1": params[p + "w1"], "w2": params[p + "w2"], "w3": params[p + "w3"]}
    if kind == "attn_bwd":
        return {"wo": params[p + "wo"], "wq": params[p + "wq"], "wk": params[p + "wk"], "wv": params[p + "wv"]}
    if kind == "ffn_bwd":
        return {"w1": params[p + "w1"], "w2": params[p + "w2"], "w3": params[p + "w3"]}
    raise ValueError(kind)


def _w(g: Graph, name: str, arr: np.ndarray):
    arr = np.asarray(arr)
    return g.weight(name, arr, shape=(1, arr.shape[0], 1, 1)) if arr.ndim == 1 else g.weight(name, arr)


def _linear(x, w, transpose: bool, dynamic: bool, lora=None):
    """``W·x`` (or ``Wᵀ·x``) for x [1, C, 1, S] and a weight ``w`` [out, in].

    Baked weights: a 1x1 conv (C46), the transpose constant-folded at compile time. Dynamic weights: one
    ``matmul(W, x)`` on the weight surface as is — ``transpose_x`` gives Wᵀ·x from the same surface, so
    no transposed copy is made on the host and no activation transposes run on the device.
    ``lora``: (A, B) program inputs of an adapter on this linear, added as ``B(A x)`` (``Aᵀ(Bᵀ x)``)."""
    out_c, in_c = (w.shape[1], w.shape[0]) if transpose else w.shape
    if not dynamic:
        y = ops.linear(x, ops.transpose(w, (1, 0)) if transpose else w)
    else:
        s = x.shape[3]
        y = ops.matmul(ops.reshape(w, (1, 1) + tuple(w.shape)), ops.reshape(x, (1, 1, in_c, s)),
                       transpose_x=transpose)
        y = ops.reshape(y, (1, out_c, 1, s))
    if lora is not None:
        y = ops.add(y, ops.lora_branch(x, lora[0], lora[1], transpose=transpose))
    return y


def build_graph(kind: str, cfg: ModelConfig, seq: int, weights: dict[str, np.ndarray], fixes: bool = True,
                dynamic: bool = False, lora: dict | None = None) -> Graph:
    """One program's graph. ``dynamic``: the linear layers are written for weights passed as program
    inputs (compile with ``dynamic_weights=True``); otherwise for baked weights. ``fixes=False`` gives the
    unprotected fp16 variant (plain RMSNorm, no score clamp) used to demonstrate the overflow cascade.
    ``lora``: ``{weight: (A [r, in], scale·B [out, r])}`` — adapters as program inputs ``<weight>_lora_a`` /
    ``<weight>_lora_b`` (marked dynamic, so only they become inputs when the base is baked)."""
    d, h, H, KV, hd, S = cfg.dim, cfg.hidden_dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, seq
    qd, kvd = d, cfg.kv_dim
    rank5 = H != KV
    clamp = SCORE_CLAMP if fixes else None
    cos, sin = rope_tables(hd, np.arange(S), cfg.rope_theta)
    g = Graph(kind)
    w = {n: _w(g, n, a) for n, a in weights.items()}
    lw = {n: (g.weight(f"{n}_lora_a", a, dynamic=True), g.weight(f"{n}_lora_b", b, dynamic=True))
          for n, (a, b) in (lora or {}).items()}
    out32 = _FP32_OUT[kind]

    def lin(x, name, transpose=False):
        return _linear(x, w[name], transpose, dynamic, lw.get(name))

    def out(name, v):
        g.output(name, v, dtype="fp32" if name in out32 else None)

    if kind == "attn_fwd":
        x = g.input("x", (1, d, 1, S))
        xn = rms_norm(x, w["rms"], cfg.norm_eps, stable=fixes)
        q = _rope(lin(xn, "wq"), H, cos, sin)
        k = _rope(lin(xn, "wk"), KV, cos, sin)
        v = lin(xn, "wv")
        p = _probs(_heads(q, H, KV, hd, S, False), _heads(k, H, KV, hd, S, True), hd, S, rank5, clamp)
        att = ops.reshape(ops.matmul(_heads(v, H, KV, hd, S, True), p, transpose_y=True), (1, qd, 1, S))
        for name, val in (("xn", xn), ("q", q), ("k", k), ("v", v), ("att", att), ("o", lin(att, "wo"))):
            out(name, val)
    elif kind == "ffn_fwd":
        x = g.input("x", (1, d, 1, S))
        xn = rms_norm(x, w["rms"], cfg.norm_eps, stable=fixes)
        h1 = lin(xn, "w1")
        h3 = lin(xn, "w3")
        gate = ops.mul(ops.silu(h1), h3)
        for name, val in (("xn", xn), ("h1", h1), ("h3", h3), ("g", gate), ("f", lin(gate, "w2"))):
            out(name, val)
    elif kind == "attn_bwd":
        dout = g.input("dout", (1, d, 1, S))
        q = g.input("q", (1, qd, 1, S))
        k = g.input("k", (1, kvd, 1, S))
        v = g.input("v", (1, kvd, 1, S))
        qh, kh, vh = _heads(q, H, KV, hd, S, False), _heads(k, H, KV, hd, S, True), _heads(v, H, KV, hd, S, True)
        p = _probs(qh, kh, hd, S, rank5, clamp)
        dah = _heads(lin(dout, "wo", True), H, KV, hd, S, False)                 # da = Wo^T dout, [.., hd, Sq]
        dv = ops.matmul(dah, p)                                                  # dV[hd, j] = sum_i da[hd, i] P[i, j]
        dp = ops.matmul(dah, vh, transpose_x=True)                               # dP[i, j] = sum_hd da[hd, i] v[hd, j]
        ds = ops.mul(ops.mul(p, ops.sub(dp, ops.reduce_sum(ops.mul(p, dp), [-1]))), 1.0 / math.sqrt(hd))
        dq = ops.matmul(kh, ds, transpose_y=True)                                 # dq[hd, i] = sum_j k[hd, j] dS[i, j]
        dk = ops.matmul(qh, ds)                                                  # dk[hd, j] = sum_i q[hd, i] dS[i, j]
        if rank5:
            dv, dk = ops.reduce_sum(dv, [2]), ops.reduce_sum(dk, [2])            # sum over the query group
        dq = _rope(ops.reshape(dq, (1, qd, 1, S)), H, cos, -sin)                 # RoPE^T = rotation by -theta
        dk = _rope(ops.reshape(dk, (1, kvd, 1, S)), KV, cos, -sin)
        dv = ops.reshape(dv, (1, kvd, 1, S))
        dxn = ops.add(ops.add(lin(dq, "wq", True), lin(dk, "wk", True)), lin(dv, "wv", True))
        for name, val in (("dq", dq), ("dk", dk), ("dv", dv), ("dxn", dxn)):
            out(name, val)
    elif kind == "ffn_bwd":
        df = g.input("df", (1, d, 1, S))
        h1 = g.input("h1", (1, h, 1, S))
        h3 = g.input("h3", (1, h, 1, S))
        dg = lin(df, "w2", True)
        sg = ops.sigmoid(h1)
        dh3 = ops.mul(dg, ops.mul(h1, sg))
        dh1 = ops.mul(ops.mul(dg, h3), ops.mul(sg, ops.add(ops.mul(h1, ops.sub(1.0, sg)), 1.0)))
        dxn = ops.add(lin(dh1, "w1", True), lin(dh3, "w3", True))
        for name, val in (("dh1", dh1), ("dh3", dh3), ("dxn", dxn)):
            out(name, val)
    else:
        raise ValueError(f"unknown program kind {kind!r}")
    return g


# ------------------------------------------------------------------------------------ budget
def compile_budget(device: str) -> tuple[int, int]:
    """(compiles used, limit) of the per-process compile budget on ``device`` (C05)."""
    from .. import _native
    return tuple(int(v) for v in _native.budget(device))


def _delta_allowed(device: str, verdict) -> str:
    from .. import doctor
    allowed = doctor.allowed_strategies(device, verdict=verdict, announce=False)
    for s in ("delta_patch", "delta_reload"):
        if s in allowed:
            return s
    if verdict is None and doctor.cached_verdict(device) is None:
        why = "no cached `orion doctor` verdict for this machine"
    else:
        why = f"`orion doctor` did not verify a delta update here (allowed: {', '.join(allowed) or 'none'})"
    raise StrategyUnavailable(f"strategy 'delta' is not available: {why}. On the ANE a rewrite+reload was measured "
                              f"to leave the old weights in place (C07); use --strategy dynamic (default) or "
                              f"recompile, or run `orion doctor` on this machine first")


# ------------------------------------------------------------------------------------ the program set
class LayerPrograms:
    """The device programs of every layer under one weight-update strategy.

    ``run(kind, layer, **inputs)`` evaluates ``kind`` with ``layer``'s current weights; ``update(params)``
    is called after every optimizer step. ``stats`` accumulates timings and counts by category.
    """

    def __init__(self, cfg: ModelConfig, seq: int, params: dict, strategy: str = "dynamic", device: str = "sim",
                 fixes: bool = True, profile=None, doctor_verdict=None, lora=None):
        from ..runtime import resolve_device
        if strategy not in STRATEGIES:
            raise TrainError(f"unknown strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
        if lora is not None and strategy != "dynamic":
            raise TrainError(f"LoRA fine-tuning bakes the frozen base weights and passes the adapters as program "
                             f"inputs; strategy {strategy!r} does not apply (use the default, dynamic)")
        self.cfg, self.seq, self.strategy, self.fixes, self.profile = cfg, seq, strategy, fixes, profile
        self.device = resolve_device(device)
        self.delta_method = _delta_allowed(self.device, doctor_verdict) if strategy == "delta" else None
        self.params = params
        self.lora = lora
        self.version = 0
        self.stats = {"stage_s": 0.0, "update_s": 0.0, "eval_s": 0.0, "evals": 0, "stages": 0}
        self._progs: dict = {}
        self._staged: dict = {}
        self._graphs: dict = {}
        if lora is not None:                    # frozen baked base, adapters as inputs: 4·L programs, once
            self._check_budget(len(KINDS) * cfg.n_layers, "compile the per-layer LoRA programs")
            for layer in range(cfg.n_layers):
                for kind in KINDS:
                    g = build_graph(kind, cfg, seq, layer_weights(kind, params, layer), fixes,
                                    lora=self._lora_values(kind, layer))
                    self._progs[(kind, layer)] = self._compile(g, dynamic=False)
                    self._staged[(kind, layer)] = self.version
        elif strategy == "dynamic":
            for kind in KINDS:
                g = build_graph(kind, cfg, seq, layer_weights(kind, params, 0), fixes, dynamic=True)
                self._progs[kind] = self._compile(g, dynamic=True)
                self._staged[kind] = (0, 0)
        else:
            self._check_budget(len(KINDS) * cfg.n_layers, "compile the per-layer programs")
            for layer in range(cfg.n_layers):
                for kind in KINDS:
                    g = build_graph(kind, cfg, seq, layer_weights(kind, params, layer), fixes)
                    self._graphs[(kind, layer)] = g
                    self._progs[(kind, layer)] = self._compile(g, dynamic=False)

    # -- compile -------------------------------------------------------------------------------
    def _compile(self, g: Graph, dynamic: bool):
        from ..compiler import compile as compile_graph
        return compile_graph(g, device=self.device, dynamic_weights=True if dynamic else None, profile=self.profile)

    @property
    def n_programs(self) -> int:
        return len(self._progs)

    def compiles_per_update(self) -> int:
        return 0 if self.strategy == "dynamic" else len(KINDS) * self.cfg.n_layers

    @property
    def shared(self) -> bool:
        """One program per kind shared by every layer (dynamic base weights)."""
        return self.strategy == "dynamic" and self.lora is None

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
    def program(self, kind: str, layer: int):
        return self._progs[kind] if self.shared else self._progs[(kind, layer)]

    def run(self, kind: str, layer: int, **inputs) -> dict[str, np.ndarray]:
        if self.lora is not None:
            if self._staged[(kind, layer)] != self.version:
                self._stage_lora(kind, layer)
        elif self.strategy == "dynamic" and self._staged[kind] != (layer, self.version):
            self._stage(kind, layer)
        prog = self.program(kind, layer)
        t = time.perf_counter()
        out = prog.run(inputs)
        self.stats["eval_s"] += time.perf_counter() - t
        self.stats["evals"] += 1
        return out

    def _stage(self, kind: str, layer: int) -> None:
        """Writes ``layer``'s weights into the shared program's weight surfaces (no compile, no load)."""
        t = time.perf_counter()
        cp = self._progs[kind]
        plan = cp.io_plan
        for name, arr in layer_weights(kind, self.params, layer).items():
            dw = plan.dynamic[name]
            b = plan.inputs[dw.input_key]
            if tuple(b.shape) != tuple(dw.surface_shape):         # packed surfaces: the general path
                cp.set_weights(**{name: arr})
                continue
            cp.program.stage(b.mil_name, b.to_surface(dw.to_surface(np.asarray(arr, np.float32))))
        self._staged[kind] = (layer, self.version)
        self.stats["stage_s"] += time.perf_counter() - t
        self.stats["stages"] += 1

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
        from ..compiler import lower
        for (kind, layer), cp in self._progs.items():
            g = self._graphs[(kind, layer)]
            for name, arr in layer_weights(kind, self.params, layer).items():
                g.weights[name].node.attrs["value"] = np.asarray(arr, np.float32).reshape(g.weights[name].shape)
            args = {k: v for k, v in cp._recompile_args.items() if k in ("target",)}
            low = lower(g, **args)
            if low.mil != cp.mil:
                raise TrainError("delta update: the lowered program text changed; refusing a partial update")
            if self.delta_method == "delta_patch":
                cp.program.delta_patch(low.weights)
            else:
                if not cp.program.delta_reload(low.weights):
                    raise TrainError("delta update: the reload left the old weights in place (C07); "
                                     "use --strategy dynamic")

    def release(self) -> None:
        for cp in self._progs.values():
            cp.release()
        self._progs.clear()
