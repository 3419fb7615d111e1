"""Composite layers built from registry ops, in the ANE layout ``[1, C, 1, S]`` (channels on axis 1).

Each composite emits only primitive ops (gelu/silu/rsqrt/reduce_mean nodes are expanded later by the
decompose pass, so the graph stays readable until then). Numerics follow the upstream ANE kernels with
their fp16 hazards removed: norms pre-scale by 1/sqrt(N) before squaring so the sum of squares cannot
overflow fp16 for RMS values up to ~250 (the plain sum of 768 squares overflows above ~9.2); attention
scales Q before QK^T (C36) and masks with -1e4, never -65504 (which can turn into -inf).
"""

from __future__ import annotations

import math

import numpy as np

from .graph import GraphError, Value
# the family modules, not the ops package: ops re-exports these composites (ops.linear, g.linear(...))
from .ops._core import as_value
from .ops.activation import clip, relu, silu, softmax
from .ops.contraction import conv, matmul
from .ops.elementwise import add, mul, pow, rsqrt, sub  # pow: the MIL op (ops.pow), not the builtin
from .ops.reduction import reduce_max, reduce_mean, reduce_sum
from .ops.tensor_transformation import identity, reshape, transpose

MASK_VALUE = -1e4


def _const_like(x: Value, array) -> Value:
    return as_value(np.asarray(array, dtype=np.float32), x)


def _channel_param(x: Value, p, axis: int, what: str) -> Value:
    """A per-channel parameter broadcast over ``axis`` (array or Value of N elements)."""
    n = x.shape[axis]
    shape = tuple(n if k == axis else 1 for k in range(x.rank))
    if isinstance(p, Value):
        if p.size != n:
            raise GraphError(f"{what}: {p!r} must have {n} elements (axis {axis} of x{list(x.shape)})")
        return p if p.shape == shape else reshape(p, shape)
    arr = np.asarray(p, dtype=np.float32)
    if arr.size != n:
        raise GraphError(f"{what}: array of shape {list(arr.shape)} must have {n} elements (axis {axis} of "
                         f"x{list(x.shape)})")
    return _const_like(x, arr.reshape(shape))


def linear(x: Value, weight, bias=None, name: str | None = None) -> Value:
    """``y = W x + b`` as a 1x1 conv (C46) plus a separate add (C16).

    ``weight``: [out, in] or [out, in, 1, 1] (array or Value; for a named/dynamic weight use
    ``g.weight(name, W)``); ``x``: [1, in, 1, S]; ``bias``: [out] array or Value."""
    if isinstance(weight, Value):
        w = weight
        if w.rank == 2:
            w = reshape(w, (w.shape[0], w.shape[1], 1, 1))
    else:
        arr = np.asarray(weight)
        if arr.ndim == 2:
            arr = arr.reshape(arr.shape + (1, 1))
        w = as_value(arr, x, "linear weight")
    if w.rank != 4 or w.shape[2:] != (1, 1):
        raise GraphError(f"linear: weight must be [out, in] or [out, in, 1, 1], got {list(w.shape)}")
    if x.rank != 4 or x.shape[1] != w.shape[1]:
        raise GraphError(f"linear: x{list(x.shape)} must be [1, {w.shape[1]}, 1, S] for weight [out={w.shape[0]}, "
                         f"in={w.shape[1]}]")
    y = conv(x, w, name=None if bias is not None else name)
    if bias is not None:
        y = add(y, _channel_param(y, bias, 1, "linear bias"), name=name)
    return y


def matmul_linear(x: Value, weight: Value, transpose: bool = False, name: str | None = None) -> Value:
    """``W x`` (``transpose``: ``Wᵀ x``) for x [1, C, 1, S] and a weight that is a tensor - a program input
    (weights as inputs: training, shared layer programs) - ``[out, in]`` as stored: one ``matmul`` on its
    surface, the transpose a flag. A ``linear`` on such a weight lowers to the conv idiom of weights as
    inputs (``[1, IC, 1, OC]``), which costs two activation transposes per linear (dynamic_weights pass)."""
    if weight.rank != 2:
        raise GraphError(f"matmul_linear: weight must be [out, in], got {list(weight.shape)}")
    out_c, in_c = (weight.shape[1], weight.shape[0]) if transpose else weight.shape
    if x.rank != 4 or x.shape[0] != 1 or x.shape[2] != 1 or x.shape[1] != in_c:
        raise GraphError(f"matmul_linear: x{list(x.shape)} must be [1, {in_c}, 1, S] for weight {list(weight.shape)}"
                         f"{' (transposed)' if transpose else ''}")
    s = x.shape[3]
    y = matmul(reshape(weight, (1, 1) + tuple(weight.shape)), reshape(x, (1, 1, in_c, s)),
                   transpose_x=transpose)
    return reshape(y, (1, out_c, 1, s), name=name)


def _lora_matrix(m, x: Value, what: str) -> Value:
    if isinstance(m, Value):
        if m.rank != 2:
            raise GraphError(f"{what}: {m!r} must be a rank-2 [rows, cols] weight")
        return m
    arr = np.asarray(m)
    if arr.ndim != 2:
        raise GraphError(f"{what}: array of shape {list(arr.shape)} must be rank 2")
    return as_value(arr, x, what)


def lora_branch(x: Value, lora_a, lora_b, scale: float = 1.0, transpose: bool = False,
                name: str | None = None) -> Value:
    """The low-rank path of a LoRA linear: ``scale * B (A x)`` (``transpose``: ``scale * Aᵀ (Bᵀ x)``, the
    backward's data path) for x [1, C, 1, S], ``lora_a`` [r, in], ``lora_b`` [out, r].

    A and B are normally program inputs (``g.weight(name, arr, dynamic=True)``): the dynamic-weights pass
    passes each as is (``[1, r, 1, in]`` / ``[1, out, 1, r]`` surfaces, padded by io_legalize to the
    minimum surface size, C04) and the branch is two matmuls on those surfaces, no transposes. ``scale``
    (alpha / r) is baked when it is not 1; orion's adapter code folds it into the staged B instead, so
    adapters with a different alpha swap without a compile."""
    a = _lora_matrix(lora_a, x, "lora A")
    b = _lora_matrix(lora_b, x, "lora B")
    r, n_in = a.shape
    n_out = b.shape[0]
    if b.shape[1] != r:
        raise GraphError(f"lora: A{list(a.shape)} and B{list(b.shape)} disagree on the rank (A [r, in], B [out, r])")
    if x.rank != 4 or x.shape[0] != 1 or x.shape[2] != 1:
        raise GraphError(f"lora: x{list(x.shape)} must be [1, C, 1, S]")
    s = x.shape[3]
    want = n_out if transpose else n_in
    if x.shape[1] != want:
        raise GraphError(f"lora: x{list(x.shape)} must have {want} channels for A{list(a.shape)}, B{list(b.shape)}"
                         f"{' (transposed)' if transpose else ''}")
    x4 = reshape(x, (1, 1, x.shape[1], s))
    a4 = reshape(a, (1, 1, r, n_in))
    b4 = reshape(b, (1, 1, n_out, r))
    if transpose:
        u = matmul(b4, x4, transpose_x=True)                   # [1, 1, r, S] = Bᵀ x
        y = matmul(a4, u, transpose_x=True)                    # [1, 1, in, S] = Aᵀ u
        out_c = n_in
    else:
        u = matmul(a4, x4)                                     # [1, 1, r, S] = A x
        y = matmul(b4, u)                                      # [1, 1, out, S] = B u
        out_c = n_out
    if scale != 1.0:
        y = mul(y, float(scale))
    return reshape(y, (1, out_c, 1, s), name=name)


def lora_linear(x: Value, weight, lora_a, lora_b, bias=None, scale: float = 1.0, name: str | None = None) -> Value:
    """A linear with a LoRA adapter: ``W x + b + scale * B (A x)`` — W baked (a 1x1 conv, C46), A [r, in]
    and B [out, r] usually program inputs (hot-swappable with zero compiles; see :func:`lora_branch`)."""
    y = linear(x, weight, bias)
    return add(y, lora_branch(x, lora_a, lora_b, scale), name=name)


def layer_norm(x: Value, gamma=None, beta=None, eps: float = 1e-5, axis: int = 1, name: str | None = None) -> Value:
    """LayerNorm over ``axis`` (channels): centre with the mean, then RMS-normalise (pow(-0.5), C20)."""
    axis = axis % x.rank
    n = x.shape[axis]
    xc = sub(x, reduce_mean(x, [axis]))
    xs = mul(xc, 1.0 / math.sqrt(n))            # pre-scale: the sum of squares is the variance
    var = reduce_sum(mul(xs, xs), [axis])
    y = mul(xc, rsqrt(add(var, float(eps))))
    if gamma is not None:
        y = mul(y, _channel_param(y, gamma, axis, "layer_norm gamma"))
    if beta is not None:
        y = add(y, _channel_param(y, beta, axis, "layer_norm beta"))
    if name:
        y = identity(y, name=name)
    return y


NORM_TINY = 2.0 ** -14      # floor of the stable RMSNorm's prescale (1/NORM_TINY stays finite in fp16)


def inv_rms(x: Value, eps: float, axis: int = 1, stable: bool = True) -> Value:
    """``(mean(x^2, axis) + eps)^-1/2``. ``stable``: prescaled by 1/max|x| first, so the sum of squares can
    neither overflow fp16 (the plain form returns zeros once the RMS exceeds ~256) nor underflow for small
    inputs (it is >= 1/n); costs two reductions and a few elementwise ops. Plain: prescaled by 1/sqrt(n)."""
    axis = axis % x.rank
    n = x.shape[axis]
    if not stable:
        xs = mul(x, 1.0 / math.sqrt(n))
        return rsqrt(add(reduce_sum(mul(xs, xs), [axis]), float(eps)))
    m = add(relu(reduce_max(x, [axis])), relu(reduce_max(mul(x, -1.0), [axis])))  # >= max|x|
    inv = pow(add(m, NORM_TINY), -1.0)                                       # <= 16384
    t = mul(x, mul(inv, 1.0 / math.sqrt(n)))                                 # |t| <= 1/sqrt(n)
    ms = reduce_sum(mul(t, t), [axis])                                       # <= 1
    e = mul(inv, math.sqrt(eps))                                                 # <= 52
    return mul(inv, pow(add(ms, mul(e, e)), -0.5))                   # <= 1/sqrt(eps)


def rms_norm(x: Value, weight=None, eps: float = 1e-5, axis: int = 1, name: str | None = None,
             stable: bool = False) -> Value:
    """RMSNorm over ``axis``: ``x * (mean(x^2) + eps)^-0.5 * weight`` (x pre-scaled by 1/sqrt(N) before squaring);
    ``stable``: :func:`inv_rms`'s overflow-proof form."""
    y = mul(x, inv_rms(x, eps, axis, stable))
    if weight is not None:
        y = mul(y, _channel_param(y, weight, axis % x.rank, "rms_norm weight"))
    if name:
        y = identity(y, name=name)
    return y


def causal_mask(s_q: int, s_kv: int | None = None, value: float = MASK_VALUE) -> np.ndarray:
    """Additive mask [1, 1, s_q, s_kv]: 0 where key j <= query i + (s_kv - s_q), ``value`` above."""
    s_kv = s_q if s_kv is None else s_kv
    i = np.arange(s_q)[:, None] + (s_kv - s_q)
    j = np.arange(s_kv)[None, :]
    return np.where(j <= i, 0.0, value).astype(np.float32).reshape(1, 1, s_q, s_kv)


def _heads(what: str, d: int, n_heads: int, n_kv_heads: int | None) -> tuple[int, int]:
    """(kv heads, head dim) of a D-wide query split into ``n_heads`` (grouped onto ``n_kv_heads``)."""
    hkv = n_kv_heads or n_heads
    if d % n_heads or n_heads % hkv:
        raise GraphError(f"{what}: D={d} must divide into n_heads={n_heads}, and n_heads into "
                         f"n_kv_heads={hkv} groups")
    return hkv, d // n_heads


def causal_attention(q: Value, k: Value, v: Value, n_heads: int, n_kv_heads: int | None = None,
                     mask="causal", name: str | None = None, scale: float | None = None,
                     clamp: float | None = None) -> Value:
    """Multi-head attention on [1, D, 1, S] tensors with an explicit additive mask (never SDPA, C06).

    ``mask``: "causal" (a baked [1, 1, Sq, Skv] const, queries aligned to the end of the keys),
    None, or an additive mask (array or Value broadcastable to [1, H, Sq, Skv]).
    ``n_kv_heads`` < ``n_heads`` gives grouped-query attention (rank-5 broadcasting); ``scale``: the query
    scaling (default ``head_dim ** -0.5``; Gemma: ``query_pre_attn_scalar ** -0.5``). ``clamp``: scores
    are clipped to ±clamp before the mask (an overflowed score becomes a saturated softmax input instead
    of inf - inf = NaN; keep clamp below -MASK_VALUE / 2 so the mask still dominates)."""
    for t, nm in ((q, "q"), (k, "k"), (v, "v")):
        if t.rank != 4 or t.shape[0] != 1 or t.shape[2] != 1:
            raise GraphError(f"causal_attention: {nm}{list(t.shape)} must be [1, D, 1, S]")
    d, s_q = q.shape[1], q.shape[3]
    hkv, hd = _heads("causal_attention", d, n_heads, n_kv_heads)
    s_kv = k.shape[3]
    if k.shape != v.shape or k.shape[1] != hkv * hd:
        raise GraphError(f"causal_attention: k{list(k.shape)} and v{list(v.shape)} must both be "
                         f"[1, {hkv * hd}, 1, Skv]")
    if hkv == n_heads:
        qh = reshape(q, (1, n_heads, hd, s_q))
        kh = reshape(k, (1, n_heads, hd, s_kv))
        vh = reshape(v, (1, n_heads, hd, s_kv))
        mshape = (1, 1, s_q, s_kv)
    else:
        g = n_heads // hkv
        qh = reshape(q, (1, hkv, g, hd, s_q))
        kh = reshape(k, (1, hkv, 1, hd, s_kv))
        vh = reshape(v, (1, hkv, 1, hd, s_kv))
        mshape = (1, 1, 1, s_q, s_kv)
    qh = mul(qh, 1.0 / math.sqrt(hd) if scale is None else float(scale))   # scale Q first (C36)
    scores = matmul(qh, kh, transpose_x=True)             # [.., Sq, Skv]
    if clamp is not None:
        scores = clip(scores, -float(clamp), float(clamp))     # inf -> +-clamp, NaN stays
    if isinstance(mask, str):
        if mask != "causal":
            raise GraphError(f"causal_attention: mask must be 'causal', None, an array or a Value, got {mask!r}")
        scores = add(scores, _const_like(scores, causal_mask(s_q, s_kv).reshape(mshape)))
    elif mask is not None:
        m = mask if isinstance(mask, Value) else np.asarray(mask, np.float32)
        if (m.rank if isinstance(m, Value) else m.ndim) == 4 and len(mshape) == 5:   # [1, 1, Sq, Skv], grouped heads
            m = reshape(m, (1,) + tuple(m.shape)) if isinstance(m, Value) else m.reshape((1,) + m.shape)
        scores = add(scores, m if isinstance(m, Value) else _const_like(scores, m))
    p = softmax(scores, axis=-1)
    o = matmul(vh, p, transpose_y=True)                   # [.., hd, Sq]
    return reshape(o, (1, d, 1, s_q), name=name)


def region_attention(q: Value, k: Value, v: Value, n_heads: int, n_kv_heads: int | None = None, mask=None,
                     name: str | None = None, scale: float | None = None) -> Value:
    """Attention of S independent sequences in one program: query column ``i`` of ``q [1, D, 1, S]``
    attends only to region ``i`` of the caches, ``k`` and ``v [1, S * n_kv_heads, R, head_dim]`` (row
    ``i * n_kv_heads + h``: sequence i's head h over R positions), with the additive ``mask [1, 1, S, R]``
    (row i: column i's mask over its region; a Value or array). Both caches are position-major, so the
    host writes a new token as contiguous runs of head_dim (a head_dim-major K took one scattered element
    per cache line: most of a batched step's host time); the scores' matmul reads K transposed (``q K^T``)
    and ``P V`` reads V, both in place.

    The query columns move to a leading batch axis (two small transposes of q and of the output), so each
    column's scores, softmax and value sums are those of :func:`causal_attention` for one query over a
    cache of R keys - every output the same in-order chain of products - at 1/S of the work of attending
    over all S regions with the others masked."""
    if q.rank != 4 or q.shape[0] != 1 or q.shape[2] != 1:
        raise GraphError(f"region_attention: q{list(q.shape)} must be [1, D, 1, S]")
    d, s = q.shape[1], q.shape[3]
    hkv, hd = _heads("region_attention", d, n_heads, n_kv_heads)
    r = k.shape[2] if k.rank == 4 else -1
    if k.shape != (1, s * hkv, r, hd) or v.shape != (1, s * hkv, r, hd):
        raise GraphError(f"region_attention: k{list(k.shape)} and v{list(v.shape)} must both be "
                         f"[1, {s * hkv}, R, {hd}] (S x n_kv_heads regions of R positions)")
    qt = transpose(reshape(q, (d, s)), (1, 0))          # [S, D]: column i's query in row i
    if hkv == n_heads:
        qh = reshape(qt, (s, n_heads, 1, hd))
        kh = reshape(k, (s, n_heads, r, hd))
        vh = reshape(v, (s, n_heads, r, hd))
        mshape = (s, 1, 1, r)
    else:
        g = n_heads // hkv
        qh = reshape(qt, (s, hkv, g, 1, hd))
        kh = reshape(k, (s, hkv, 1, r, hd))
        vh = reshape(v, (s, hkv, 1, r, hd))
        mshape = (s, 1, 1, 1, r)
    qh = mul(qh, 1.0 / math.sqrt(hd) if scale is None else float(scale))   # scale Q first (C36)
    scores = matmul(qh, kh, transpose_y=True)               # [S, .., 1, R]
    if mask is not None:
        m = mask if isinstance(mask, Value) else _const_like(scores, np.asarray(mask, np.float32))
        if m.size != s * r:
            raise GraphError(f"region_attention: mask{list(m.shape)} must be [1, 1, {s}, {r}]")
        scores = add(scores, reshape(m, mshape))
    p = softmax(scores, axis=-1)
    o = matmul(p, vh)                                       # [S, .., 1, hd]
    return reshape(transpose(reshape(o, (s, d)), (1, 0)), (1, d, 1, s), name=name)


def rope_tables(head_dim: int, positions, base: float = 10000.0) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin [1, head_dim/2, 1, S] with frequency base^(-2i/head_dim) (llama2.c)."""
    if head_dim % 2:
        raise GraphError(f"rope: head_dim {head_dim} must be even")
    pos = np.asarray(positions, dtype=np.float64)
    freq = base ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    ang = freq[:, None] * pos[None, :]
    return (np.cos(ang).reshape(1, head_dim // 2, 1, -1), np.sin(ang).reshape(1, head_dim // 2, 1, -1))


def rope(x: Value, n_heads: int, *, positions=None, offset: int = 0, base: float = 10000.0,
         layout: str = "adjacent", cos=None, sin=None, name: str | None = None) -> Value:
    """Rotary embedding on [1, D, 1, S] (D = heads * head_dim).

    ``layout="adjacent"`` rotates pairs (2i, 2i+1) as llama2.c does; ``"rotate_half"`` pairs (i, i + hd/2)
    as HF Llama. Tables are baked consts for ``positions`` (default ``offset + arange(S)``), or ``cos``/``sin``
    Values [1, hd/2, 1, S] (program inputs for decode). The pair swap is a 2x2 matmul (no gather/concat)."""
    if x.rank != 4 or x.shape[0] != 1 or x.shape[2] != 1:
        raise GraphError(f"rope: x{list(x.shape)} must be [1, D, 1, S]")
    d, s = x.shape[1], x.shape[3]
    if d % n_heads or (d // n_heads) % 2:
        raise GraphError(f"rope: D={d} must split into {n_heads} heads of even size")
    hd = d // n_heads
    if (cos is None) != (sin is None):
        raise GraphError("rope: give both cos and sin, or neither")
    if cos is None:
        pos = np.arange(offset, offset + s) if positions is None else np.asarray(positions)
        if pos.shape != (s,):
            raise GraphError(f"rope: positions must have S={s} entries, got shape {list(pos.shape)}")
        cos, sin = rope_tables(hd, pos, base)
    if layout == "adjacent":
        xs = reshape(x, (1, n_heads, hd // 2, 2, s))
        tshape, rshape = (1, 1, hd // 2, 1, s), (1, 1, 1, 2, 2)
    elif layout == "rotate_half":
        xs = reshape(x, (1, n_heads, 2, hd // 2 * s))
        tshape, rshape = (1, 1, 1, hd // 2 * s), (1, 1, 2, 2)
    else:
        raise GraphError(f"rope: layout must be 'adjacent' or 'rotate_half', got {layout!r}")

    def table(t, what):
        if isinstance(t, Value):
            if t.size != hd // 2 * s:
                raise GraphError(f"rope: {what}{list(t.shape)} must be [1, {hd // 2}, 1, {s}]")
            return reshape(t, tshape)
        return _const_like(xs, np.asarray(t, np.float32).reshape(tshape))

    rot = _const_like(xs, np.array([[0.0, -1.0], [1.0, 0.0]], np.float32).reshape(rshape))
    swapped = matmul(rot, xs)                 # (x0, x1) -> (-x1, x0) per pair
    y = add(mul(xs, table(cos, "cos")), mul(swapped, table(sin, "sin")))
    return reshape(y, (1, d, 1, s), name=name)


def swiglu_ffn(x: Value, w1, w2, w3, name: str | None = None) -> Value:
    """Llama FFN: ``W2 (silu(W1 x) * W3 x)`` with w1 (gate) / w3 (up) [h, d] and w2 (down) [d, h]."""
    h1 = linear(x, w1)
    h3 = linear(x, w3)
    return linear(mul(silu(h1), h3), w2, name=name)
