"""Float64 reference for the training tests: the Llama forward in token-major layout ([S, d], the
opposite of the device's channel-major layout) with a tiny tape-based reverse-mode autodiff, so weight
gradients come from the generic matmul rule and a transposed dW or a swapped output cannot be mirrored.

Every LlamaConfig feature is written here from its definition (transformers' modules), independently of
the training code: q/k/v biases, per-head q/k RMSNorm before RoPE, explicit head_dim, per-layer RoPE
(angles from ``cfg.layer_rope(i)``), sliding windows, query scale, sandwich norms, tanh-GELU, embedding
scale and final soft-capping.
"""

from __future__ import annotations

import numpy as np


class T:
    """A float64 tensor on the tape."""

    def __init__(self, value, parents=(), vjp=None):
        self.value = np.asarray(value, np.float64)
        self.parents = parents
        self.vjp = vjp            # g -> tuple of parent grads
        self.grad = None

    # sugar
    def __add__(self, o): return add(self, o)
    def __sub__(self, o): return add(self, mul(o, -1.0))
    def __mul__(self, o): return mul(self, o)
    def __matmul__(self, o): return matmul(self, o)

    @property
    def shape(self):
        return self.value.shape


def _t(x):
    return x if isinstance(x, T) else T(x)


def _unbroadcast(g, shape):
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for i, s in enumerate(shape):
        if s == 1 and g.shape[i] != 1:
            g = g.sum(axis=i, keepdims=True)
    return g


def add(a, b):
    a, b = _t(a), _t(b)
    return T(a.value + b.value, (a, b), lambda g: (_unbroadcast(g, a.shape), _unbroadcast(g, b.shape)))


def mul(a, b):
    a, b = _t(a), _t(b)
    return T(a.value * b.value, (a, b),
             lambda g: (_unbroadcast(g * b.value, a.shape), _unbroadcast(g * a.value, b.shape)))


def matmul(a, b):
    a, b = _t(a), _t(b)
    return T(a.value @ b.value, (a, b),
             lambda g: (_unbroadcast(g @ np.swapaxes(b.value, -1, -2), a.shape),
                        _unbroadcast(np.swapaxes(a.value, -1, -2) @ g, b.shape)))


def exp(a):
    v = np.exp(a.value)
    return T(v, (a,), lambda g: (g * v,))


def log(a):
    return T(np.log(a.value), (a,), lambda g: (g / a.value,))


def power(a, p):
    return T(a.value ** p, (a,), lambda g: (g * p * a.value ** (p - 1),))


def tanh(a):
    t = np.tanh(a.value)
    return T(t, (a,), lambda g: (g * (1 - t * t),))


def sigmoid(a):
    s = 1.0 / (1.0 + np.exp(-a.value))
    return T(s, (a,), lambda g: (g * s * (1 - s),))


def sum_(a, axis, keepdims=True):
    return T(a.value.sum(axis=axis, keepdims=keepdims), (a,),
             lambda g: (np.broadcast_to(g if keepdims else np.expand_dims(g, axis), a.shape).copy(),))


def max_const(a, axis):   # treated as a constant (softmax shift)
    return T(a.value.max(axis=axis, keepdims=True))


def reshape(a, shape):
    return T(a.value.reshape(shape), (a,), lambda g: (g.reshape(a.shape),))


def transpose(a, axes):
    inv = np.argsort(axes)
    return T(a.value.transpose(axes), (a,), lambda g: (g.transpose(inv),))


def take_rows(a, idx):
    def vjp(g):
        out = np.zeros(a.shape)
        np.add.at(out, idx, g)
        return (out,)
    return T(a.value[idx], (a,), vjp)


def getitem(a, index):
    def vjp(g):
        out = np.zeros(a.shape)
        out[index] = g
        return (out,)
    return T(a.value[index], (a,), vjp)


def stack_last(parts):
    vals = [p.value for p in parts]
    return T(np.stack(vals, axis=-1), tuple(parts), lambda g: tuple(g[..., i] for i in range(len(parts))))


def backward(root: T) -> None:
    order, seen = [], set()

    def visit(n):
        if id(n) in seen:
            return
        seen.add(id(n))
        for p in n.parents:
            visit(p)
        order.append(n)
    visit(root)
    root.grad = np.ones_like(root.value)
    for n in reversed(order):
        if n.vjp is None or n.grad is None:
            continue
        for p, g in zip(n.parents, n.vjp(n.grad)):
            p.grad = g if p.grad is None else p.grad + g


# ---------------------------------------------------------------------------------------- the model
def rmsnorm(x, w, eps):
    ms = mul(sum_(mul(x, x), axis=-1), 1.0 / x.shape[-1])
    return mul(mul(x, power(add(ms, eps), -0.5)), w)


def softmax_last(s):
    e = exp(add(s, mul(max_const(s, -1), -1.0)))
    return mul(e, power(sum_(e, -1), -1.0))


def rope(x, heads, theta, ang=None):
    """x [S, heads*hd]: llama2.c adjacent pairs (2j, 2j+1) rotated by pos * theta^(-2j/hd) (or by
    ``ang`` [S, hd/2])."""
    s, dd = x.shape
    hd = dd // heads
    if ang is None:
        freq = theta ** (-np.arange(0, hd, 2) / hd)
        ang = np.arange(s)[:, None] * freq[None, :]                   # [S, hd/2]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    xr = reshape(x, (s, heads, hd // 2, 2))
    x0, x1 = getitem(xr, (..., 0)), getitem(xr, (..., 1))
    y0 = add(mul(x0, cos), mul(x1, -sin))
    y1 = add(mul(x0, sin), mul(x1, cos))
    return reshape(stack_last([y0, y1]), (s, dd))


def gelu_tanh(x):
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (transformers' gelu_pytorch_tanh)."""
    u = mul(add(x, mul(power(x, 3), 0.044715)), np.sqrt(2 / np.pi))
    return mul(mul(x, add(tanh(u), 1.0)), 0.5)


def head_rmsnorm(x, w, heads, eps):
    s, dd = x.shape
    return reshape(rmsnorm(reshape(x, (s, heads, dd // heads)), w, eps), (s, dd))


def attention(q, k, v, heads, kv_heads, clamp=None, scale=None, window=None):
    s, qd = q.shape
    hd = qd // heads
    g = heads // kv_heads
    qh = transpose(reshape(q, (s, heads, hd)), (1, 0, 2))            # [H, S, hd]
    kh = transpose(reshape(k, (s, kv_heads, hd)), (1, 0, 2))
    vh = transpose(reshape(v, (s, kv_heads, hd)), (1, 0, 2))
    if g > 1:   # repeat kv heads (gather along the head axis)
        idx = np.repeat(np.arange(kv_heads), g)
        kh, vh = take_rows(kh, idx), take_rows(vh, idx)
    sc = mul(matmul(qh, transpose(kh, (0, 2, 1))), 1.0 / np.sqrt(hd) if scale is None else scale)
    if clamp is not None:      # forward-only use (the clip has no gradient here)
        sc = T(np.clip(sc.value, -clamp, clamp))
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    visible = (j <= i) & ((j > i - window) if window is not None else True)
    mask = np.where(visible, 0.0, -1e30)
    p = softmax_last(add(sc, mask))
    o = matmul(p, vh)                                                  # [H, S, hd]
    return reshape(transpose(o, (1, 0, 2)), (s, qd))


def loss_and_grads(cfg, params: dict, tokens: np.ndarray, targets: np.ndarray):
    """Mean cross-entropy over the B*S targets that count (a target of -1 does not: masked prompt tokens,
    padding) and float64 gradients of every parameter."""
    P = {k: T(np.asarray(v, np.float64)) for k, v in params.items()}
    total = None
    n = int(np.count_nonzero(targets >= 0))
    for b in range(tokens.shape[0]):
        x = mul(take_rows(P["tok_emb"], tokens[b]), float(getattr(cfg, "embed_scale", 1.0)))
        S = tokens.shape[1]
        feat = hasattr(cfg, "qk_norm")                                  # a LlamaConfig with feature fields
        for i in range(cfg.n_layers):
            p = f"layers.{i}."

            def lin(t, name, bias=None):
                y = matmul(t, transpose(P[p + name], (1, 0)))
                return add(y, P[p + bias]) if feat and cfg.qkv_bias and bias else y
            xn = rmsnorm(x, P[p + "rms_att"], cfg.norm_eps)
            q, k, v = lin(xn, "wq", "bq"), lin(xn, "wk", "bk"), lin(xn, "wv", "bv")
            if feat and cfg.qk_norm:
                q = head_rmsnorm(q, P[p + "q_norm"], cfg.n_heads, cfg.norm_eps)
                k = head_rmsnorm(k, P[p + "k_norm"], cfg.n_kv_heads, cfg.norm_eps)
            ang = cfg.layer_rope(i).angles(cfg.head_dim, np.arange(S)).T if feat else None
            q = rope(q, cfg.n_heads, cfg.rope_theta, ang)
            k = rope(k, cfg.n_kv_heads, cfg.rope_theta, ang)
            window = cfg.sliding_window if feat and cfg.layer_sliding(i) else None
            a = attention(q, k, v, cfg.n_heads, cfg.n_kv_heads, scale=cfg.query_scale if feat else None,
                          window=window)
            o = matmul(a, transpose(P[p + "wo"], (1, 0)))
            sandwich = feat and cfg.sandwich_norms
            h = add(x, rmsnorm(o, P[p + "rms_att_post"], cfg.norm_eps) if sandwich else o)
            xn2 = rmsnorm(h, P[p + "rms_ffn"], cfg.norm_eps)
            h1 = matmul(xn2, transpose(P[p + "w1"], (1, 0)))
            h3 = matmul(xn2, transpose(P[p + "w3"], (1, 0)))
            act = gelu_tanh(h1) if feat and cfg.mlp_act == "gelu_tanh" else mul(h1, sigmoid(h1))
            f = matmul(mul(act, h3), transpose(P[p + "w2"], (1, 0)))
            x = add(h, rmsnorm(f, P[p + "rms_ffn_post"], cfg.norm_eps) if sandwich else f)
        xf = rmsnorm(x, P["rms_final"], cfg.norm_eps)
        W = P.get("wcls", P["tok_emb"])
        logits = matmul(xf, transpose(W, (1, 0)))                       # [S, V]
        cap = getattr(cfg, "final_softcap", None)
        if cap:
            logits = mul(tanh(mul(logits, 1.0 / cap)), cap)
        lse = add(log(sum_(exp(add(logits, mul(max_const(logits, -1), -1.0))), -1)), max_const(logits, -1))
        counts = (targets[b] >= 0).astype(np.float64)[:, None]           # [S, 1]: 1 where the target counts
        onehot = np.zeros(logits.shape)
        onehot[np.arange(len(targets[b])), np.maximum(targets[b], 0)] = 1.0
        lb = sum_(mul(add(lse, mul(sum_(mul(logits, onehot), -1), -1.0)), counts), (0, 1))
        total = lb if total is None else add(total, lb)
    loss = mul(total, 1.0 / n)
    backward(loss)
    grads = {k: (t.grad if t.grad is not None else np.zeros(t.shape)) for k, t in P.items()}
    return float(loss.value.reshape(())), grads


def loss_only(cfg, params, tokens, targets) -> float:
    return loss_and_grads(cfg, params, tokens, targets)[0]


def check_finite_differences(cfg, params: dict, tokens, targets, per_param: int = 3, seed: int = 0) -> None:
    """Asserts that :func:`loss_and_grads` agrees with central differences at ``per_param`` random entries
    of every (float64) parameter."""
    _, g = loss_and_grads(cfg, params, tokens, targets)
    rng = np.random.default_rng(seed)
    eps = 1e-6
    for name, arr in params.items():
        for _ in range(per_param):
            idx = tuple(rng.integers(0, s) for s in arr.shape)
            old = arr[idx]
            arr[idx] = old + eps
            lp = loss_only(cfg, params, tokens, targets)
            arr[idx] = old - eps
            lm = loss_only(cfg, params, tokens, targets)
            arr[idx] = old
            fd = (lp - lm) / (2 * eps)
            assert abs(fd - g[name][idx]) <= 1e-6 + 1e-5 * abs(fd), (name, idx, fd, g[name][idx])


def adapter_grads(adapter, grads: dict) -> dict:
    """LoRA adapter gradients from the weight gradients at the merged weights W + s·B·A (chain rule):
    dA = s·Bᵀ·dW, dB = s·dW·Aᵀ."""
    out = {}
    for n in adapter.names:
        s = adapter.scale(n)
        out[n + ".lora_A"] = s * adapter.B[n].astype(np.float64).T @ grads[n]
        out[n + ".lora_B"] = s * grads[n] @ adapter.A[n].astype(np.float64).T
    return out
