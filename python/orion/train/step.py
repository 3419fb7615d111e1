"""One training microbatch: forward and backward through the device programs, the rest on the CPU.

CPU side (fp32, numpy BLAS): token embedding (times the config's embed_scale) and its gradient, the
residual stream (with Gemma's post-attention/post-MLP norms when ``sandwich_norms``), the final RMSNorm,
the classifier, soft-capping and cross-entropy, every RMSNorm backward, q/k/v bias and q/k norm weight
gradients, and every weight gradient as
``dW[out, in] = dY · Xᵀ`` (never its transpose, which an upstream trainer applied to ``W[out, in]``).
Gradients accumulate in ``grads`` (same names and shapes as the parameters) across microbatches; they are
multiplied by the loss scale until the optimizer unscales them.

LoRA (``lora=`` an :class:`orion.lora.Adapter`): the base is frozen, so no base weight, norm or embedding
gradient is computed; for every adapted linear ``y = W x + s·B(A x)`` the CPU forms, from the same dY
and X the full dW would use, ``dB = s · dY (A X)ᵀ`` ``[out, r]`` and ``dA = s · (Bᵀ dY) Xᵀ`` ``[r, in]``
into ``grads["<linear>.lora_B"]`` / ``grads["<linear>.lora_A"]``.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import numpy as np

from .. import _native

from ..models.config import LlamaConfig
from ..models.fp16_safety import Fp16RangeError
from .examples import IGNORE
from .model import classifier
from .programs import SCALED_OUTPUTS, LayerPrograms
from .stability import (StabilityStats, count_norm_overflow, count_score_clamps, grad_fits_fp16,
                        to_device_activation)


@dataclass
class MicroResult:
    loss_sum: float               # summed token cross-entropy (nats)
    n_tokens: int
    finite: bool                  # False: non-finite loss or a gradient overflow (skip the step)
    cpu_s: float = 0.0
    stats: StabilityStats = field(default_factory=StabilityStats)


def rms_scale(x: np.ndarray, eps: float) -> np.ndarray:
    """x [C, S] -> r [S] = (mean(x^2) + eps)^-1/2 per column (fp32)."""
    return (1.0 / np.sqrt(np.einsum("cs,cs->s", x, x) / x.shape[0] + eps)).astype(np.float32, copy=False)


def rms_forward(x: np.ndarray, w: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """x [C, S] -> (y = x * r * w, r [S]) with r = :func:`rms_scale`."""
    r = rms_scale(x, eps)
    return (x * r) * w[:, None], r


def rms_backward(x: np.ndarray, w: np.ndarray, r: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of y = x*r*w: (dx, dw). dx = r*(dxh - x*r^2*mean(dxh*x)), dxh = dy*w."""
    dxh = dy * w[:, None]
    m = np.einsum("cs,cs->s", dxh, x) / x.shape[0]
    dx = r * (dxh - x * (r * r * m))
    dw = np.einsum("cs,cs->c", dy, x * r)
    return dx.astype(np.float32, copy=False), dw.astype(np.float32, copy=False)


def cross_entropy(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """logits [S, V] fp32 -> (per-token loss [S] float64, softmax probabilities [S, V] fp32)."""
    m = row_max(logits)
    e = np.subtract(logits, m)
    np.exp(e, out=e)
    z = e.sum(axis=1, keepdims=True)
    lse = (np.log(z.astype(np.float64)) + m).ravel()
    loss = lse - logits[np.arange(len(targets)), targets]
    e /= z
    return loss, e


def row_max(z: np.ndarray) -> np.ndarray:
    """``z.max(axis=1, keepdims=True)`` of z [S, V], the same values (a maximum is exact in any order; NaN
    propagates; only the sign of a zero maximum may differ, and x - (±0) and exp agree on it), by halving
    the columns with element-wise ``np.maximum``: numpy's max over the outer axis of the column-major
    logits (the native classifier's layout) ran at ~1 element/ns, 4x slower than the halving."""
    n = z.shape[1]
    if n < 64:
        return z.max(axis=1, keepdims=True)
    h = n // 2
    a = np.maximum(z[:, :h], z[:, h:2 * h])
    if n % 2:
        np.maximum(a[:, :1], z[:, n - 1:], out=a[:, :1])
    n = h
    while n > 1:
        h = n // 2
        if n % 2:
            np.maximum(a[:, :1], a[:, n - 1:n], out=a[:, :1])
        np.maximum(a[:, :h], a[:, h:2 * h], out=a[:, :h])
        n = h
    return a[:, :1].copy()


_native_gemm = None          # resolved on first use: orion's fp32 GEMM, or False (numpy's)


def matmul_f32(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` of fp32 matrices (a transposed view is read in place) into ``out`` (fresh when None).

    On AVX-512 kernels this is orion's own blocked GEMM (the simulator's microkernels on fp32 panels, run
    with the GIL released, on the pool when the device leaves it free): each element the in-order fp32 fma
    chain over k, so weight gradients do not depend on which BLAS numpy was built with or which kernel it
    picked for the CPU (an OpenBLAS forced to its AVX2 kernels ran them at half speed). Elsewhere numpy's."""
    if out is None:
        out = np.empty((a.shape[0], b.shape[1]), np.result_type(a, b))
    if (_use_native_gemm() and a.ndim == b.ndim == 2 and a.dtype == b.dtype == out.dtype == np.float32
            and _rows_or_cols(a) and _rows_or_cols(b) and out.strides[1] == 4):
        _native_gemm(a, b, out)
    else:
        np.matmul(a, b, out=out)
    return out


def _use_native_gemm() -> bool:
    global _native_gemm
    if _native_gemm is None:
        _native_gemm = _native.gemm_f32 if _native.kernel_isa() == "avx512" else False
    return bool(_native_gemm)


def _rows_or_cols(x: np.ndarray) -> bool:
    return x.strides[1] == x.itemsize or x.strides[0] == x.itemsize


def counted(targets: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(targets with :data:`IGNORE` replaced by 0, the mask of those that count - None when all do): a
    target of IGNORE (a prompt token under --mask-prompt, padding) adds nothing to the loss or gradients."""
    valid = targets != IGNORE
    if valid.all():
        return targets, None
    return np.where(valid, targets, 0), valid


def n_counted(targets: np.ndarray) -> int:
    return int(np.count_nonzero(targets != IGNORE))


def softcap(z: np.ndarray, cap: float | None) -> np.ndarray | None:
    """Final logit soft-capping in place: z <- cap·tanh(z/cap); returns tanh(z/cap) (None: no cap), whose
    1 - t² is the derivative the logits' gradient is multiplied by."""
    if not cap:
        return None
    z *= np.float32(1.0 / cap)
    np.tanh(z, out=z)
    t = z.copy()
    z *= np.float32(cap)
    return t


def _dev(x: np.ndarray) -> np.ndarray:
    return x.reshape((1, x.shape[0], 1, x.shape[1]))


def _flat(a: np.ndarray) -> np.ndarray:
    return a.reshape(a.shape[1], a.shape[3])


class StepEngine:
    """Runs microbatches through a :class:`LayerPrograms` set; parameters are fp32 master copies."""

    def __init__(self, cfg: LlamaConfig, progs: LayerPrograms, params: dict, fixes: bool = True,
                 count_clamps: bool = True, overlap: bool = True, lora=None):
        self.cfg, self.progs, self.params, self.fixes = cfg, progs, params, fixes
        self.count_clamps = count_clamps
        self.lora = lora
        self._lora_scale = {n: np.float32(lora.scale(n)) for n in lora.names} if lora is not None else {}
        # weight gradients (CPU BLAS) run on one worker thread while the device evaluates the next
        # programs (both release the GIL); one FIFO worker keeps every buffer's accumulation order fixed
        self._pool = None
        if overlap:
            from concurrent.futures import ThreadPoolExecutor  # start-up: only when the step runs in threads
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="orion-dw")
        self._pending: list = []

    def _logits(self, xf: np.ndarray, W: np.ndarray) -> np.ndarray:
        """xf [d, S], W [V, d] -> logits [S, V] = xfᵀ·Wᵀ. With the native GEMM (:func:`matmul_f32`): the
        transpose of W·xf (a column-major view), on the pool's threads. Otherwise, with the dW worker idle (the
        first microbatch's classifier), the vocabulary is split in two row halves of W, one on the worker: the
        same K loop per output element as the single product, so the logits are bit-identical, on both cores.
        Small machines only: elsewhere BLAS already threads the product (trainer.default_blas_threads)."""
        V = W.shape[0]
        if _use_native_gemm():       # W·xf: both operands as stored (xfᵀ·Wᵀ would pack W transposed); on the pool
            return matmul_f32(W, xf).T
        if self._pool is None or self._pending or V < 8192 or (os.cpu_count() or 1) > 4:   # > 4: BLAS threads
            return xf.T @ W.T
        out = np.empty((xf.shape[1], V), np.float32)
        h = V // 2
        f = self._pool.submit(np.matmul, xf.T, W[h:].T, out=out[:, h:])
        np.matmul(xf.T, W[:h].T, out=out[:, :h])
        f.result()
        return out

    def _mm(self, acc, name, a, b) -> None:
        if self.lora is not None:
            return self._lora_mm(acc, name, a, b)
        if self._pool is None:
            acc.mm(name, a, b)
        else:
            self._pending.append(self._pool.submit(acc.mm, name, a, b))

    def _lora_mm(self, acc, name, a, b) -> None:
        """Adapter gradients of linear ``name`` from ``a`` = dY [out, S] (scaled) and ``b`` = Xᵀ [S, in]."""
        s = self._lora_scale.get(name)
        if s is None:
            return                              # a frozen base weight (or the classifier): no gradient
        A, B = self.lora.A[name], self.lora.B[name]

        def work():
            acc.mm(name + ".lora_B", a, (b @ A.T) * s)       # [out, r] = dY · (A X)ᵀ
            acc.mm(name + ".lora_A", (B.T @ a) * s, b)       # [r, in] = (Bᵀ dY) · Xᵀ

        if self._pool is None:
            work()
        else:
            self._pending.append(self._pool.submit(work))

    def _add(self, acc, name, v) -> None:
        if self.lora is None:
            acc.add(name, v)

    def _layer_done(self, acc, layer: int) -> None:
        """Tells an accumulator with a ``layer_done`` hook (accumulate.StepGradients: folding, and the
        gradient reduction of data-parallel training) that ``layer``'s gradients are complete: queued
        behind that layer's dW products on the FIFO worker, so the rest of the backward overlaps it."""
        hook = getattr(acc, "layer_done", None)
        if hook is None:
            return
        if self._pool is None:
            hook(layer)
        else:
            self._pending.append(self._pool.submit(hook, layer))

    def close(self) -> None:
        self._drain()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def _wait(self, job) -> None:
        """Waits for one queued dW job (and so, FIFO, every job before it); a failure drops the queue, as
        :meth:`_drain` does, so the next microbatch does not raise it again."""
        try:
            job.result()
        except BaseException:
            self._pending = []
            raise

    def _drain(self) -> None:
        pending, self._pending = self._pending, []
        for f in pending:
            f.result()

    # ---------------------------------------------------------------------------------- forward
    def forward(self, tokens: np.ndarray, stats: StabilityStats, keep: bool):
        """tokens [B, S] -> (final hidden [B, d, S] fp32, per-layer saved activations or None)."""
        cfg, P = self.cfg, self.params
        B, S = tokens.shape
        emb = P["tok_emb"]
        x = np.ascontiguousarray(emb[tokens].transpose(0, 2, 1))               # [B, d, S]
        if cfg.embed_scale != 1.0:
            x *= np.float32(cfg.embed_scale)
        saved = []
        rs = self.progs.residual_scale         # the programs' input norms expect the stream times rs

        def to_device(v):
            return to_device_activation(v if rs == 1.0 else v * np.float32(rs), stats, self.fixes)

        for layer in range(cfg.n_layers):
            att = []
            for b in range(B):
                xi = to_device(x[b])
                if self.count_clamps:
                    stats.norm_rescues += count_norm_overflow(xi)
                att.append(self._sublayer("attn_fwd", layer, b, x=_dev(xi)))
                if self.count_clamps:
                    stats.score_clamps += count_score_clamps(_flat(att[b]["q"]), _flat(att[b]["k"]),
                                                             cfg.n_heads, cfg.n_kv_heads, scale=cfg.query_scale)
            h = x + np.stack([self._post(_flat(a["o"]), layer, "rms_att_post") for a in att])
            ffn = []
            for b in range(B):
                hi = to_device(h[b])
                if self.count_clamps:
                    stats.norm_rescues += count_norm_overflow(hi)
                ffn.append(self._sublayer("ffn_fwd", layer, b, x=_dev(hi)))
            x_next = h + np.stack([self._post(_flat(f["f"]), layer, "rms_ffn_post") for f in ffn])
            if keep:
                saved.append((x, att, h, ffn))
            x = x_next
        return x, saved

    def _sublayer(self, kind: str, layer: int, index: int, **inputs) -> dict:
        """A forward program's outputs (views of the surfaces of ``layer`` and microbatch row ``index``, kept
        for the backward) in true units: the ones that carry the residual scale
        (:data:`~.programs.SCALED_OUTPUTS`) divided by it. With the fp16 fixes on, a sublayer output
        that left fp16 inside the program is an :class:`~orion.models.fp16_safety.Fp16RangeError` naming
        the layer (a NaN loss would only skip the step, at every step)."""
        out = self.progs.run(kind, layer, buffers=(layer, index), **inputs)
        rs = self.progs.residual_scale
        names = SCALED_OUTPUTS[kind]
        if rs != 1.0:
            out = {**out, **{n: out[n] * np.float32(1.0 / rs) for n in names}}
        if self.fixes:
            y = out[names[-1]]
            if not np.isfinite(y).all():
                what = "attention output" if kind == "attn_fwd" else "MLP output"
                raise Fp16RangeError(
                    f"layer {layer}: the {what} left fp16's range (±65504) inside the device program with the "
                    f"residual scale {rs:g} chosen at the start (calibration text + the first training "
                    f"windows); pass a smaller one: --residual-scale {rs / 16:g} "
                    f"(TrainConfig(residual_scale=...))", layer=layer, scale=rs)
        return out

    def _post(self, y: np.ndarray, layer: int, name: str) -> np.ndarray:
        """A sublayer's output as the residual stream receives it: RMSNormed with ``name`` under sandwich
        norms (Gemma 3), else as is."""
        if not self.cfg.sandwich_norms:
            return y
        return rms_forward(y, self.params[f"layers.{layer}.{name}"], self.cfg.norm_eps)[0]

    def _post_backward(self, acc, y: np.ndarray, layer: int, name: str, dy: np.ndarray) -> np.ndarray:
        """The gradient reaching the sublayer's output ``y`` from ``dy`` at the residual add."""
        if not self.cfg.sandwich_norms:
            return dy
        w = self.params[f"layers.{layer}.{name}"]
        dy_in, dn = rms_backward(y, w, rms_scale(y, self.cfg.norm_eps), dy)
        self._add(acc, f"layers.{layer}.{name}", dn)
        return dy_in

    def loss_only(self, tokens: np.ndarray, targets: np.ndarray) -> tuple[float, int]:
        stats = StabilityStats()
        x, _ = self.forward(tokens, stats, keep=False)
        total = 0.0
        W = classifier(self.params)
        for b in range(tokens.shape[0]):
            xf, _ = rms_forward(x[b], self.params["rms_final"], self.cfg.norm_eps)
            z = xf.T @ W.T
            softcap(z, self.cfg.final_softcap)
            tb, valid = counted(targets[b])
            loss, _ = cross_entropy(z, tb)
            total += float(loss.sum() if valid is None else loss[valid].sum())
        return total, n_counted(targets)

    # ---------------------------------------------------------------------------------- fwd + bwd
    def microbatch(self, tokens: np.ndarray, targets: np.ndarray, grads, grad_scale: float) -> MicroResult:
        """Forward + backward of one microbatch; adds ``grad_scale`` × d(summed loss)/dθ into ``grads``.

        ``grad_scale`` = loss scale / tokens per optimizer step (so the accumulated gradient is the
        scaled gradient of the mean loss). ``grads``: a :class:`GradAccumulator` (or a plain dict of
        zeroed arrays)."""
        acc = grads if isinstance(grads, GradAccumulator) else GradAccumulator(grads, fresh=False)
        cfg, P, run = self.cfg, self.params, self.progs.run
        ev0 = self.progs.stats["eval_s"] + self.progs.stats["stage_s"]
        t0 = time.perf_counter()
        stats = StabilityStats()
        B, S = tokens.shape
        x, saved = self.forward(tokens, stats, keep=True)
        W = classifier(P)
        cls_name = "wcls" if "wcls" in P else "tok_emb"
        total = 0.0
        dx = np.empty_like(x)
        for b in range(B):
            xf, r = rms_forward(x[b], P["rms_final"], cfg.norm_eps)
            z = self._logits(xf, W)
            t = softcap(z, cfg.final_softcap)
            tb, valid = counted(targets[b])
            loss, prob = cross_entropy(z, tb)
            total += float(loss.sum() if valid is None else loss[valid].sum())
            prob[np.arange(S), tb] -= 1.0
            if valid is not None:
                prob[~valid] = 0.0                                               # positions that do not count
            prob *= grad_scale                                                   # dlogits [S, V] (scaled)
            if t is not None:                                                    # through cap·tanh(z/cap)
                t *= t
                np.subtract(1.0, t, out=t)
                prob *= t
            self._mm(acc, cls_name, prob.T, xf.T)                                     # [V, d] = dlogits^T · xf^T
            dxf = matmul_f32(prob, W).T                                          # [d, S]
            dx[b], dn = rms_backward(x[b], P["rms_final"], r, dxf)
            self._add(acc, "rms_final", dn)
        if not np.isfinite(total):
            stats.nonfinite_loss += 1
            return self._done(total, n_counted(targets), False, t0, ev0, stats)
        done_at: dict = {}                      # layer -> the last dW job queued for it (None: none pending)
        for layer in reversed(range(cfg.n_layers)):
            p = f"layers.{layer}."
            x_in, att, h, ffn = saved[layer]
            # the backward programs write a ring of two output surfaces (layer % 2): the dW worker must be
            # done with the ones layer + 2 wrote (its dq/dk/dv, dh1/dh3) before this layer overwrites them
            ring = layer % 2
            if done_at.get(layer + 2) is not None:
                self._wait(done_at[layer + 2])
            # ---- FFN: x_next = h + W2(silu(W1 xn2) * W3 xn2), xn2 = rms(h)
            dh = np.empty_like(dx)
            bwd, dfs = [], []
            for b in range(B):
                df = self._post_backward(acc, _flat(ffn[b]["f"]), layer, "rms_ffn_post", dx[b])
                if not grad_fits_fp16(df):
                    stats.grad_overflows += 1
                    return self._done(total, n_counted(targets), False, t0, ev0, stats)
                dfs.append(df)
                bwd.append(run("ffn_bwd", layer, buffers=(ring, b), df=_dev(df), h1=ffn[b]["h1"], h3=ffn[b]["h3"]))
            for b in range(B):
                o, f = bwd[b], ffn[b]
                xn2 = _flat(f["xn"])
                self._mm(acc, p + "w2", dfs[b], _flat(f["g"]).T)                      # [d, h]
                self._mm(acc, p + "w1", _flat(o["dh1"]), xn2.T)                       # [h, d]
                self._mm(acc, p + "w3", _flat(o["dh3"]), xn2.T)
                r2 = rms_scale(h[b], cfg.norm_eps)
                dxr, dn = rms_backward(h[b], P[p + "rms_ffn"], r2, _flat(o["dxn"]))
                dh[b] = dx[b] + dxr
                self._add(acc, p + "rms_ffn", dn)
            # ---- attention: h = x + Wo·attn(rope(Wq xn), rope(Wk xn), Wv xn), xn = rms(x)
            dx = np.empty_like(dh)              # a new buffer: the dW worker may still read the old dx
            bwd, douts = [], []
            for b in range(B):
                a = att[b]
                dout = self._post_backward(acc, _flat(a["o"]), layer, "rms_att_post", dh[b])
                if not grad_fits_fp16(dout):
                    stats.grad_overflows += 1
                    return self._done(total, n_counted(targets), False, t0, ev0, stats)
                douts.append(dout)
                extra = {"ql": a["ql"], "kl": a["kl"]} if cfg.qk_norm else {}
                bwd.append(run("attn_bwd", layer, buffers=(ring, b), dout=_dev(dout), q=a["q"], k=a["k"], v=a["v"],
                               **extra))
            for b in range(B):
                o, a = bwd[b], att[b]
                xn = _flat(a["xn"])
                dq, dk, dv = _flat(o["dq"]), _flat(o["dk"]), _flat(o["dv"])          # at Wq/Wk/Wv's outputs
                self._mm(acc, p + "wo", douts[b], _flat(a["att"]).T)                  # [d, q_dim]
                self._mm(acc, p + "wq", dq, xn.T)                                     # [q_dim, d]
                self._mm(acc, p + "wk", dk, xn.T)                                     # [kv_dim, d]
                self._mm(acc, p + "wv", dv, xn.T)
                if cfg.qkv_bias:
                    for name, dy in (("bq", dq), ("bk", dk), ("bv", dv)):
                        self._add(acc, p + name, dy.sum(axis=1))
                if cfg.qk_norm:                                                  # sum of dy·x̂ over heads, positions
                    hd = cfg.head_dim
                    self._add(acc, p + "q_norm", _flat(o["gqn"]).reshape(-1, hd, S).sum(axis=(0, 2)))
                    self._add(acc, p + "k_norm", _flat(o["gkn"]).reshape(-1, hd, S).sum(axis=(0, 2)))
                r1 = rms_scale(x_in[b], cfg.norm_eps)
                dxr, dn = rms_backward(x_in[b], P[p + "rms_att"], r1, _flat(o["dxn"]))
                dx[b] = dh[b] + dxr
                self._add(acc, p + "rms_att", dn)
            self._layer_done(acc, layer)
            done_at[layer] = self._pending[-1] if self._pending else None
        self._drain()                           # the (tied) classifier gradient shares tok_emb's buffer
        if self.lora is None:
            ge = acc.target("tok_emb")
            for b in range(B):
                np.add.at(ge, tokens[b], dx[b].T if cfg.embed_scale == 1.0 else dx[b].T * np.float32(cfg.embed_scale))
        return self._done(total, n_counted(targets), True, t0, ev0, stats)

    def _done(self, total, n, finite, t0, ev0, stats) -> MicroResult:
        self._drain()
        dev = self.progs.stats["eval_s"] + self.progs.stats["stage_s"] - ev0
        return MicroResult(total, n, finite, time.perf_counter() - t0 - dev, stats)


class GradAccumulator:
    """Gradient buffers written in place: the first contribution of a step is a direct ``matmul(out=)``
    (no zeroing pass, no temporary), later ones accumulate. ``start()`` begins a step; ``finish()``
    zeroes whatever no microbatch wrote (e.g. after an aborted backward)."""

    def __init__(self, grads: dict, fresh: bool = True):
        self.grads = grads
        self.written: set[str] = set() if fresh else set(grads)

    def start(self) -> None:
        self.written.clear()

    def target(self, name: str) -> np.ndarray:
        """The buffer, zeroed first if this step has not written it (for scatter-adds)."""
        g = self.grads[name]
        if name not in self.written:
            g.fill(0.0)
            self.written.add(name)
        return g

    def mm(self, name: str, a: np.ndarray, b: np.ndarray) -> None:
        g = self.grads[name]
        if name in self.written:
            g += matmul_f32(a, b)
        else:
            matmul_f32(a, b, out=g)
            self.written.add(name)

    def add(self, name: str, v: np.ndarray) -> None:
        g = self.grads[name]
        if name in self.written:
            g += v
        else:
            g[...] = v
            self.written.add(name)

    def finish(self) -> dict:
        for name, g in self.grads.items():
            if name not in self.written:
                g.fill(0.0)
                self.written.add(name)
        return self.grads

    # dict-like access for callers that read the gradients
    def __getitem__(self, name):
        return self.grads[name]

    def items(self):
        return self.grads.items()

    def values(self):
        return self.grads.values()

    def __iter__(self):
        return iter(self.grads)


def zero_grads(params: dict, grads: dict | None = None) -> dict:
    if grads is None:
        return {k: np.zeros_like(v, dtype=np.float32) for k, v in params.items()}
    for g in grads.values():
        g.fill(0.0)
    return grads
