"""THE op registry: one ``OpDef`` per op, and the builder functions that create nodes from it.

Each entry gives the IR name, the MIL spelling (mil-dialect.md §4), tensor parameters, non-tensor
parameters (emitted by the codegen as named consts, C15), the shape/dtype rule, a float64 numpy
reference (used by constant folding, the reference interpreter and the tests) and the ANE notes.
Ops the ANE rejects (``lowered_by``) are legal in a graph; the named pass rewrites them before codegen.

Composites (gelu-based FFNs, norms, attention, RoPE, linear, SwiGLU) live in ``composites.py`` and
are re-exported at the bottom of this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .graph import GraphError, MAX_RANK, Value, check_shape

REQUIRED = object()
MAX_AXIS = 65536  # C22


@dataclass(frozen=True)
class AttrDef:
    """A non-tensor parameter. ``kind``: int32, int32[], bool, fp16, string. ``mil=False``: IR-only."""
    name: str
    kind: str
    default: Any = REQUIRED
    mil: bool = True


@dataclass(frozen=True)
class OpDef:
    name: str                         # IR op name
    mil: str | None                   # MIL spelling (None: never emitted)
    inputs: tuple[str, ...]           # tensor params in MIL keyword names; "bias?" optional, "*values" tuple
    attrs: tuple[AttrDef, ...]
    infer: Callable[[dict, dict], list]
    eval: Callable[[dict, dict], list] | None
    ane: str                          # ANE notes, constraint IDs
    lowered_by: str | None = None     # pass that removes it before codegen (the ANE rejects it)
    category: str = "tensor"

    def attr(self, name: str) -> AttrDef:
        for a in self.attrs:
            if a.name == name:
                return a
        raise KeyError(name)


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    OPS[op.name] = op
    return op


def infer_types(op: str, inputs: dict, attrs: dict) -> list[tuple[tuple[int, ...], str]]:
    try:
        d = OPS[op]
    except KeyError:
        raise GraphError(f"unknown op {op!r}; registered ops: {', '.join(sorted(OPS))}") from None
    return d.infer(inputs, attrs)


# ------------------------------------------------------------------------------------------------
# shape rules
# ------------------------------------------------------------------------------------------------

def _fmt(**vals) -> str:
    return ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in vals.items())


def broadcast_shapes(op: str, a: tuple, b: tuple, names=("x", "y")) -> tuple[int, ...]:
    r = max(len(a), len(b))
    pa, pb = (1,) * (r - len(a)) + tuple(a), (1,) * (r - len(b)) + tuple(b)
    out = []
    for i, (p, q) in enumerate(zip(pa, pb)):
        if p == q or q == 1:
            out.append(p)
        elif p == 1:
            out.append(q)
        else:
            raise GraphError(f"{op}: cannot broadcast {names[0]}{list(a)} with {names[1]}{list(b)}: axis {i} "
                             f"(from the right: {r - i}) has {p} vs {q}; each axis must match or be 1")
    return tuple(out)


def _same_float(op: str, **vals: Value) -> str:
    dts = {v.dtype for v in vals.values()}
    if len(dts) != 1:
        raise GraphError(f"{op}: operand dtypes differ ({_fmt(**vals)}); insert a cast (the ANE computes in fp16)")
    dt = dts.pop()
    if dt not in ("fp16", "fp32"):
        raise GraphError(f"{op}: expects floating-point operands, got {_fmt(**vals)}")
    return dt


def _infer_binary(name):
    def infer(i, a):
        x, y = i["x"], i["y"]
        dt = _same_float(name, x=x, y=y)
        return [(broadcast_shapes(name, x.shape, y.shape), dt)]
    return infer


def _infer_unary(name):
    def infer(i, a):
        return [(i["x"].shape, _same_float(name, x=i["x"]))]
    return infer


def _axis(op: str, axis: int, rank: int, shape) -> int:
    if not -rank <= axis < rank:
        raise GraphError(f"{op}: axis {axis} out of range for a rank-{rank} tensor {list(shape)}")
    return axis % rank


def _infer_conv(i, a):
    x, w = i["x"], i["weight"]
    dt = _same_float("conv", x=x, weight=w)
    if x.rank != 4 or w.rank != 4:
        raise GraphError(f"conv: expects x [N, Cin, H, W] and weight [Cout, Cin/groups, kH, kW] (rank 4), got "
                         f"{_fmt(x=x, weight=w)}")
    g = a["groups"]
    n, cin, h, wd = x.shape
    cout, cpg, kh, kw = w.shape
    if g < 1 or cin % g or cout % g or cin // g != cpg:
        raise GraphError(f"conv: {_fmt(x=x, weight=w)} with groups={g}: weight axis 1 must be Cin/groups = "
                         f"{cin // max(g, 1)} and Cin, Cout divisible by groups")
    if "bias" in i:
        b = i["bias"]
        if b.size != cout:
            raise GraphError(f"conv: bias{list(b.shape)} must have Cout = {cout} elements")
    sh, sw = a["strides"]
    dh, dw = a["dilations"]
    if a["pad_type"] == "same":
        oh, ow = -(-h // sh), -(-wd // sw)
    else:
        pt, pb, pl, pr = a["pad"] if a["pad_type"] == "custom" else (0, 0, 0, 0)
        oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
        ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise GraphError(f"conv: kernel {kh}x{kw} does not fit input {list(x.shape)} (output would be {oh}x{ow})")
    return [((n, cout, oh, ow), dt)]


def _infer_matmul(i, a):
    x, y = i["x"], i["y"]
    dt = _same_float("matmul", x=x, y=y)
    if x.rank < 2 or y.rank < 2:
        raise GraphError(f"matmul: operands need rank >= 2, got {_fmt(x=x, y=y)}")
    xm, xk = (x.shape[-1], x.shape[-2]) if a["transpose_x"] else (x.shape[-2], x.shape[-1])
    yk, yn = (y.shape[-1], y.shape[-2]) if a["transpose_y"] else (y.shape[-2], y.shape[-1])
    if xk != yk:
        raise GraphError(f"matmul: contraction sizes differ: {_fmt(x=x, y=y)} with transpose_x={a['transpose_x']}, "
                         f"transpose_y={a['transpose_y']} contracts {xk} with {yk}")
    batch = broadcast_shapes("matmul (batch axes)", x.shape[:-2], y.shape[:-2])
    return [(batch + (xm, yn), dt)]


def _infer_softmax(i, a):
    x = i["x"]
    _axis("softmax", a["axis"], x.rank, x.shape)
    return [(x.shape, _same_float("softmax", x=x))]


def _infer_reduce(name):
    def infer(i, a):
        x = i["x"]
        axes = [_axis(name, ax, x.rank, x.shape) for ax in a["axes"]]
        if len(set(axes)) != len(axes):
            raise GraphError(f"{name}: repeated axes {list(a['axes'])}")
        if a["keep_dims"]:
            shape = tuple(1 if k in axes else d for k, d in enumerate(x.shape))
        else:
            shape = tuple(d for k, d in enumerate(x.shape) if k not in axes)
        return [(shape, _same_float(name, x=x))]
    return infer


def _infer_reshape(i, a):
    x, shape = i["x"], tuple(a["shape"])
    shape = check_shape(shape, f"reshape of {x!r}")
    if int(np.prod(shape)) != x.size:
        raise GraphError(f"reshape: cannot reshape x{list(x.shape)} ({x.size} elements) to {list(shape)} "
                         f"({int(np.prod(shape))} elements)")
    return [(shape, x.dtype)]


def _infer_transpose(i, a):
    x, perm = i["x"], list(a["perm"])
    if sorted(perm) != list(range(x.rank)):
        raise GraphError(f"transpose: perm {perm} is not a permutation of the {x.rank} axes of x{list(x.shape)}")
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


def _infer_cast(i, a):
    if a["dtype"] not in ("fp16", "fp32", "int32"):
        raise GraphError(f"cast: unsupported target dtype {a['dtype']!r} (fp16, fp32 or int32)")
    return [(i["x"].shape, a["dtype"])]


def _infer_slice_by_index(i, a):
    x = i["x"]
    begin, end, stride = a["begin"], a["end"], a["stride"]
    if not (len(begin) == len(end) == len(stride) == x.rank):
        raise GraphError(f"slice_by_index: begin/end/stride need {x.rank} entries for x{list(x.shape)}")
    shape = []
    for k, (b, e, s, d) in enumerate(zip(begin, end, stride, x.shape)):
        if s < 1 or not 0 <= b < e <= d:
            raise GraphError(f"slice_by_index: axis {k} of x{list(x.shape)}: need 0 <= begin {b} < end {e} <= {d} "
                             f"and stride {s} >= 1")
        shape.append(-(-(e - b) // s))
    return [(tuple(shape), x.dtype)]


def _infer_slice_by_size(i, a):
    x = i["x"]
    begin, size = a["begin"], a["size"]
    if not (len(begin) == len(size) == x.rank):
        raise GraphError(f"slice_by_size: begin/size need {x.rank} entries for x{list(x.shape)}")
    for k, (b, s, d) in enumerate(zip(begin, size, x.shape)):
        if s < 1 or b < 0 or b + s > d:
            raise GraphError(f"slice_by_size: axis {k} of x{list(x.shape)}: begin {b} + size {s} exceeds {d}")
    return [(tuple(size), x.dtype)]


def _infer_concat(i, a):
    vals = i["values"]
    if len(vals) < 1:
        raise GraphError("concat: needs at least one value")
    first = vals[0]
    ax = _axis("concat", a["axis"], first.rank, first.shape)
    total = 0
    for k, v in enumerate(vals):
        if v.rank != first.rank or any(d != e for j, (d, e) in enumerate(zip(v.shape, first.shape)) if j != ax):
            raise GraphError(f"concat: values[{k}]{list(v.shape)} does not match values[0]{list(first.shape)} "
                             f"outside axis {ax}")
        if v.dtype != first.dtype:
            raise GraphError(f"concat: values[{k}] is {v.dtype}, values[0] is {first.dtype}")
        total += v.shape[ax]
    return [(first.shape[:ax] + (total,) + first.shape[ax + 1:], first.dtype)]


def _infer_identity(i, a):
    return [(i["x"].shape, i["x"].dtype)]


def _infer_clip(i, a):
    if a["alpha"] > a["beta"]:
        raise GraphError(f"clip: alpha {a['alpha']} > beta {a['beta']}")
    return _infer_unary("clip")(i, a)


def _infer_sdpa(i, a):
    q, k, v = i["query"], i["key"], i["value"]
    dt = _same_float("scaled_dot_product_attention", query=q, key=k, value=v)
    if q.rank < 3 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise GraphError(f"scaled_dot_product_attention: expects query [..., L, E], key [..., S, E], value "
                         f"[..., S, Ev]; got {_fmt(query=q, key=k, value=v)}")
    batch = broadcast_shapes("sdpa (batch axes)", q.shape[:-2], k.shape[:-2])
    batch = broadcast_shapes("sdpa (batch axes)", batch, v.shape[:-2])
    if "attn_mask" in i:
        broadcast_shapes("sdpa (attn_mask)", batch + (q.shape[-2], k.shape[-2]), i["attn_mask"].shape,
                         names=("scores", "attn_mask"))
    return [(batch + (q.shape[-2], v.shape[-1]), dt)]


# ------------------------------------------------------------------------------------------------
# float64 numpy references
# ------------------------------------------------------------------------------------------------

def _ev_conv(i, a):
    x, w = i["x"], i["weight"]
    g = a["groups"]
    (sh, sw), (dh, dw) = a["strides"], a["dilations"]
    kh, kw = w.shape[2:]
    if a["pad_type"] == "same":
        oh, ow = -(-x.shape[2] // sh), -(-x.shape[3] // sw)
        ph = max((oh - 1) * sh + dh * (kh - 1) + 1 - x.shape[2], 0)
        pw = max((ow - 1) * sw + dw * (kw - 1) + 1 - x.shape[3], 0)
        pad = (ph // 2, ph - ph // 2, pw // 2, pw - pw // 2)
    else:
        pad = a["pad"] if a["pad_type"] == "custom" else (0, 0, 0, 0)
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    n, cin, h, wd = xp.shape
    cout = w.shape[0]
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (wd - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, cout, oh, ow))
    cpg, opg = cin // g, cout // g
    for gi in range(g):
        xs = xp[:, gi * cpg:(gi + 1) * cpg]
        ws = w[gi * opg:(gi + 1) * opg]
        for r in range(kh):
            for c in range(kw):
                patch = xs[:, :, r * dh: r * dh + sh * (oh - 1) + 1: sh, c * dw: c * dw + sw * (ow - 1) + 1: sw]
                y[:, gi * opg:(gi + 1) * opg] += np.einsum("oc,nchw->nohw", ws[:, :, r, c], patch)
    if "bias" in i:
        y = y + i["bias"].reshape(1, cout, 1, 1)
    return [y]


def _ev_matmul(i, a):
    x, y = i["x"], i["y"]
    if a["transpose_x"]:
        x = np.swapaxes(x, -1, -2)
    if a["transpose_y"]:
        y = np.swapaxes(y, -1, -2)
    return [np.matmul(x, y)]


def _softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _ev_sdpa(i, a):
    q, k, v = i["query"], i["key"], i["value"]
    s = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if "attn_mask" in i:
        s = s + i["attn_mask"]
    return [np.matmul(_softmax(s, -1), v)]


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _reduce(fn):
    def ev(i, a):
        return [fn(i["x"], axis=tuple(a["axes"]), keepdims=a["keep_dims"])]
    return ev


def _ev_cast(i, a):
    x = i["x"]
    return [np.trunc(x) if a["dtype"] == "int32" else x.astype(np.float64)]


def _ev_slice_by_index(i, a):
    return [i["x"][tuple(slice(b, e, s) for b, e, s in zip(a["begin"], a["end"], a["stride"]))]]


def _ev_slice_by_size(i, a):
    return [i["x"][tuple(slice(b, b + s) for b, s in zip(a["begin"], a["size"]))]]


def _u(fn):
    return lambda i, a: [fn(i["x"])]


def _b(fn):
    return lambda i, a: [fn(i["x"], i["y"])]


def _errstate(fn):
    def ev(i, a):
        with np.errstate(all="ignore"):
            return fn(i, a)
    return ev


# ------------------------------------------------------------------------------------------------
# the registry
# ------------------------------------------------------------------------------------------------

_BINARY = {
    "add": (np.add, "numpy broadcasting; add against a scalar const costs one weight slot (C19)"),
    "sub": (np.subtract, "numpy broadcasting"),
    "mul": (np.multiply, "numpy broadcasting; mul(reduce_result, 0) fails to compile (C33) - constant folding "
                         "removes multiplications by zero"),
    "real_div": (np.divide, "unused on the ANE by reference kernels; decompose rewrites it as mul by a reciprocal "
                            "const or x * pow(y, -1)"),
    "pow": (np.power, "used as pow(v, -0.5) for every norm; costs one weight slot (C19)"),
}
for _n, (_f, _note) in _BINARY.items():
    register(OpDef(_n, _n, ("x", "y"), (), _infer_binary(_n), _errstate(_b(_f)), _note,
                   lowered_by="decompose" if _n == "real_div" else None, category="elementwise"))

_UNARY = {
    "exp": (np.exp, "compiles (fork probe)", None),
    "sqrt": (np.sqrt, "compiles (fork probe)", None),
    "tanh": (np.tanh, "used by the tanh GELU", None),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), "used by SiLU = x*sigmoid(x)", None),
    "relu": (lambda x: np.maximum(x, 0.0), "in Orion's op set; no production use", None),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), "rejected by the ANE compiler even without weights (C20); "
                                            "decompose lowers it to pow(x, -0.5)", "decompose"),
    "gelu": (_gelu_tanh, "tanh approximation 0.5x(1+tanh(0.79788(x+0.044715x^3))); the gelu op is rejected "
                         "on the in-memory path (C10), decompose expands it", "decompose"),
    "silu": (lambda x: x / (1.0 + np.exp(-x)), "treated as unsupported; decompose lowers it to x*sigmoid(x)",
             "decompose"),
}
for _n, (_f, _note, _low) in _UNARY.items():
    register(OpDef(_n, _n, ("x",), (), _infer_unary(_n), _errstate(_u(_f)), _note, lowered_by=_low,
                   category="elementwise"))

register(OpDef("log", "log", ("x",), (AttrDef("epsilon", "fp16", 0.0),), _infer_unary("log"),
               _errstate(lambda i, a: [np.log(i["x"] + a["epsilon"])]),
               "no reference use; ANEForge: pass epsilon explicitly (the 1e-45 default underflows in fp16), "
               "so it is always emitted", category="elementwise"))
register(OpDef("clip", "clip", ("x",), (AttrDef("alpha", "fp16"), AttrDef("beta", "fp16")), _infer_clip,
               lambda i, a: [np.clip(i["x"], a["alpha"], a["beta"])],
               "no reference use on the in-memory path (unverified)", category="elementwise"))
register(OpDef("conv", "conv", ("x", "weight", "bias?"),
               (AttrDef("dilations", "int32[]", (1, 1)), AttrDef("groups", "int32", 1),
                AttrDef("pad", "int32[]", (0, 0, 0, 0)), AttrDef("pad_type", "string", "valid"),
                AttrDef("strides", "int32[]", (1, 1))),
               _infer_conv, _ev_conv,
               "the workhorse: linear = 1x1 conv, weight [out, in, 1, 1] on x [1, in, 1, S], ~3x faster than "
               "matmul (C46). Never emit bias= (C16, decompose adds an add); weight must be a const (dynamic "
               "weights lower to the matmul idiom); kernel width <= 15 (C24); input channels > 8,192 are split "
               "(C25); all five parameters emitted as named consts"))
register(OpDef("matmul", "matmul", ("x", "y"),
               (AttrDef("transpose_x", "bool", False), AttrDef("transpose_y", "bool", False)),
               _infer_matmul, _ev_matmul,
               "batched, broadcasting over leading axes; transpose flags must be named bool consts (C15); "
               "outputs saturate near +-32,752 (C36); disputed on M1/M2 (C30)"))
register(OpDef("softmax", "softmax", ("x",), (AttrDef("axis", "int32", -1),), _infer_softmax,
               lambda i, a: [_softmax(i["x"], a["axis"])],
               "axis as a named int32 const; a non-power-of-two last axis is disputed (C21): decompose rewrites "
               "that case as exp(x - max) / sum"))
for _n, _f, _note, _low in (
        ("reduce_sum", np.sum, "used by every norm (axis 1); axes and keep_dims as named consts", None),
        ("reduce_mean", np.mean, "availability disputed (C27): decompose emits reduce_sum * (1/N)", "decompose"),
        ("reduce_max", np.max, "in Orion's codegen, no production use", None)):
    register(OpDef(_n, _n, ("x",), (AttrDef("axes", "int32[]"), AttrDef("keep_dims", "bool", True)),
                   _infer_reduce(_n), _reduce(_f), _note, lowered_by=_low))
register(OpDef("reshape", "reshape", ("x",), (AttrDef("shape", "int32[]"),), _infer_reshape,
               lambda i, a: [i["x"].reshape(a["shape"])], "shape as an int32 const; costs on the ANE, minimise",
               category="layout"))
register(OpDef("transpose", "transpose", ("x",), (AttrDef("perm", "int32[]"),), _infer_transpose,
               lambda i, a: [np.transpose(i["x"], a["perm"])], "perm as an int32 const", category="layout"))
register(OpDef("cast", "cast", ("x",), (AttrDef("dtype", "string"),), _infer_cast, _ev_cast,
               "fp32 I/O + cast works on M3+, rejected on M1/M2 (C28: the ios16 target converts on the host)",
               category="layout"))
register(OpDef("slice_by_index", "slice_by_index", ("x",),
               (AttrDef("begin", "int32[]"), AttrDef("end", "int32[]"), AttrDef("stride", "int32[]")),
               _infer_slice_by_index, _ev_slice_by_index,
               "end exclusive; on function inputs together with norms and convs disputed (C34): the compiler "
               "slices inputs with slice_by_size", category="layout"))
register(OpDef("slice_by_size", "slice_by_size", ("x",), (AttrDef("begin", "int32[]"), AttrDef("size", "int32[]")),
               _infer_slice_by_size, _ev_slice_by_size,
               "used to unpack packed inputs; width-axis begin != 0 saturates on pre-A16 chips (C35)",
               category="layout"))
register(OpDef("concat", "concat", ("*values",), (AttrDef("axis", "int32"), AttrDef("interleave", "bool", False)),
               _infer_concat, lambda i, a: [np.concatenate(i["values"], axis=a["axis"])],
               "disputed (C01): decompose turns a concat output into several program outputs; otherwise only "
               "the full form (named axis and interleave) is emitted, with allow_concat=True", category="layout"))
register(OpDef("identity", "identity", ("x",), (), _infer_identity, lambda i, a: [i["x"]],
               "compiles; removed by identity elimination except where an output needs an op (C17)",
               category="layout"))
register(OpDef("scaled_dot_product_attention", "scaled_dot_product_attention", ("query", "key", "value", "attn_mask?"),
               (), _infer_sdpa, _errstate(_ev_sdpa),
               "iOS18 only; attn_mask is ignored on the ANE (C06) and fused SDPA is unreliable (C45): decompose "
               "emits explicit masked attention", lowered_by="decompose"))
register(OpDef("const", "const", (), (), lambda i, a: [], None,
               "scalars and int vectors inline; float tensors as BLOBFILE weights (offset = metadata record, C08)",
               category="source"))
register(OpDef("input", None, (), (), lambda i, a: [], None,
               "a function parameter; bound to surfaces in alphabetical order of MIL names (C13)", category="source"))


# ------------------------------------------------------------------------------------------------
# builders
# ------------------------------------------------------------------------------------------------

BUILDERS: set[str] = set()


def builder(fn):
    BUILDERS.add(fn.__name__)
    return fn


def _graph_of(*vals):
    for v in vals:
        if isinstance(v, Value):
            return v.node.graph
        if isinstance(v, (tuple, list)):
            for x in v:
                if isinstance(x, Value):
                    return x.node.graph
    raise GraphError("an op needs at least one graph Value operand (got only Python numbers or arrays)")


def as_value(x, like: Value, what: str = "operand") -> Value:
    """Python numbers and numpy arrays become consts of ``like``'s dtype in ``like``'s graph."""
    g = like.node.graph
    if isinstance(x, Value):
        g._check_member(x, what)
        return x
    if isinstance(x, (int, float, np.integer, np.floating)) or (isinstance(x, np.ndarray) and x.ndim == 0):
        return g.const(float(x), dtype=like.dtype if like.dtype in ("fp16", "fp32") else "fp16")
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "fiu":
            raise GraphError(f"{what}: cannot use an array of dtype {x.dtype} as a tensor operand")
        return g.const(x, dtype=like.dtype)
    raise GraphError(f"{what}: expected a Value, a number or a numpy array, got {type(x).__name__}")


def make(op: str, inputs: dict, attrs: dict | None = None, name: str | None = None) -> Value:
    """Build one node of ``op`` (attrs get registry defaults) and return its first output."""
    d = OPS[op]
    attrs = dict(attrs or {})
    for ad in d.attrs:
        if ad.name not in attrs:
            if ad.default is REQUIRED:
                raise GraphError(f"{op}: missing required parameter {ad.name!r}")
            attrs[ad.name] = ad.default
    unknown = set(attrs) - {ad.name for ad in d.attrs}
    if unknown:
        raise GraphError(f"{op}: unknown parameter(s) {sorted(unknown)}")
    g = _graph_of(*inputs.values())
    for k, v in inputs.items():
        for x in (v if isinstance(v, tuple) else (v,)):
            g._check_member(x, f"{op}({k}=...)")
    try:
        types = d.infer(inputs, attrs)
    except GraphError as e:
        raise GraphError(f"{e}" + (f" [building {name!r}]" if name else "")) from None
    for shape, _ in types:
        if len(shape) > MAX_RANK:
            raise GraphError(f"{op}: result rank {len(shape)} {list(shape)} exceeds 5 [C23]")
    return g.add_node(op, inputs, attrs, types, name=name).out


def _binary(op, x, y, name):
    if isinstance(x, Value):
        y = as_value(y, x, f"{op} y")
    elif isinstance(y, Value):
        x = as_value(x, y, f"{op} x")
    else:
        _graph_of(x, y)
    return make(op, {"x": x, "y": y}, name=name)


@builder
def add(x, y, name=None): return _binary("add", x, y, name)
@builder
def sub(x, y, name=None): return _binary("sub", x, y, name)
@builder
def mul(x, y, name=None): return _binary("mul", x, y, name)
@builder
def real_div(x, y, name=None): return _binary("real_div", x, y, name)
@builder
def div(x, y, name=None): return _binary("real_div", x, y, name)
@builder
def pow(x, y, name=None): return _binary("pow", x, y, name)  # noqa: A001


def _unary(op):
    def fn(x: Value, name=None) -> Value:
        return make(op, {"x": x}, name=name)
    fn.__name__ = op
    fn.__doc__ = OPS[op].ane
    BUILDERS.add(op)
    return fn


exp = _unary("exp")
sqrt = _unary("sqrt")
tanh = _unary("tanh")
sigmoid = _unary("sigmoid")
relu = _unary("relu")
rsqrt = _unary("rsqrt")
gelu = _unary("gelu")
silu = _unary("silu")


@builder
def log(x: Value, epsilon: float = 0.0, name=None) -> Value:
    return make("log", {"x": x}, {"epsilon": float(epsilon)}, name=name)


@builder
def clip(x: Value, alpha: float, beta: float, name=None) -> Value:
    return make("clip", {"x": x}, {"alpha": float(alpha), "beta": float(beta)}, name=name)


def _pair(v, what):
    t = (v, v) if isinstance(v, int) else tuple(int(e) for e in v)
    if len(t) != 2:
        raise GraphError(f"conv: {what} must be an int or a pair, got {v!r}")
    return t


@builder
def conv(x: Value, weight, bias=None, strides=1, pad_type="valid", pad=(0, 0, 0, 0), dilations=1, groups=1,
         name=None) -> Value:
    """2-D convolution; ``weight`` [Cout, Cin/groups, kH, kW] (an array becomes a weight const)."""
    if pad_type not in ("valid", "same", "custom"):
        raise GraphError(f"conv: pad_type must be 'valid', 'same' or 'custom', got {pad_type!r}")
    inputs = {"x": x, "weight": as_value(weight, x, "conv weight")}
    if bias is not None:
        inputs["bias"] = as_value(bias, x, "conv bias")
    attrs = {"strides": _pair(strides, "strides"), "dilations": _pair(dilations, "dilations"),
             "pad_type": pad_type, "pad": tuple(int(p) for p in pad), "groups": int(groups)}
    if len(attrs["pad"]) != 4:
        raise GraphError(f"conv: pad must be [top, bottom, left, right], got {pad!r}")
    return make("conv", inputs, attrs, name=name)


@builder
def matmul(x: Value, y, transpose_x: bool = False, transpose_y: bool = False, name=None) -> Value:
    if not isinstance(x, Value):
        x = as_value(x, y, "matmul x")
    return make("matmul", {"x": x, "y": as_value(y, x, "matmul y")},
                {"transpose_x": bool(transpose_x), "transpose_y": bool(transpose_y)}, name=name)


@builder
def softmax(x: Value, axis: int = -1, name=None) -> Value:
    return make("softmax", {"x": x}, {"axis": _axis("softmax", int(axis), x.rank, x.shape)}, name=name)


def _norm_axes(op, x, axes):
    axes = [axes] if isinstance(axes, int) else list(axes)
    return tuple(_axis(op, int(a), x.rank, x.shape) for a in axes)


def _reducer(op):
    def fn(x: Value, axes, keep_dims: bool = True, name=None) -> Value:
        return make(op, {"x": x}, {"axes": _norm_axes(op, x, axes), "keep_dims": bool(keep_dims)}, name=name)
    fn.__name__ = op
    fn.__doc__ = OPS[op].ane + " (keep_dims defaults to True: the [1, 1, 1, S] shapes every ANE kernel uses)"
    BUILDERS.add(op)
    return fn


reduce_sum = _reducer("reduce_sum")
reduce_mean = _reducer("reduce_mean")
reduce_max = _reducer("reduce_max")


@builder
def reshape(x: Value, shape: Sequence[int], name=None) -> Value:
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise GraphError(f"reshape: at most one -1 in {shape}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        if known == 0 or x.size % known:
            raise GraphError(f"reshape: cannot infer -1 in {shape} for x{list(x.shape)}")
        shape[shape.index(-1)] = x.size // known
    return make("reshape", {"x": x}, {"shape": tuple(shape)}, name=name)


@builder
def transpose(x: Value, perm: Sequence[int], name=None) -> Value:
    return make("transpose", {"x": x}, {"perm": tuple(int(p) % max(x.rank, 1) for p in perm)}, name=name)


@builder
def cast(x: Value, dtype: str, name=None) -> Value:
    return make("cast", {"x": x}, {"dtype": dtype}, name=name)


@builder
def identity(x: Value, name=None) -> Value:
    return make("identity", {"x": x}, name=name)


@builder
def slice_by_index(x: Value, begin, end, stride=None, name=None) -> Value:
    begin = [int(b) % d if b < 0 else int(b) for b, d in zip(begin, x.shape)]
    end = [int(e) % d if e < 0 else min(int(e), d) for e, d in zip(end, x.shape)]
    stride = [1] * x.rank if stride is None else [int(s) for s in stride]
    return make("slice_by_index", {"x": x}, {"begin": tuple(begin), "end": tuple(end), "stride": tuple(stride)},
                name=name)


@builder
def slice_by_size(x: Value, begin, size, name=None) -> Value:
    size = [d - b if s == -1 else s for b, s, d in zip(begin, size, x.shape)]
    return make("slice_by_size", {"x": x}, {"begin": tuple(int(b) for b in begin), "size": tuple(int(s) for s in size)},
                name=name)


def getitem(x: Value, index) -> Value:
    """``x[..., a:b]``: slices (and Ellipsis) only; stride 1 → slice_by_size, else slice_by_index."""
    if not isinstance(index, tuple):
        index = (index,)
    if any(i is Ellipsis for i in index):
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (x.rank - len(index) + 1) + index[k + 1:]
    if len(index) > x.rank:
        raise GraphError(f"too many indices for x{list(x.shape)}")
    index = tuple(index) + (slice(None),) * (x.rank - len(index))
    begin, end, stride = [], [], []
    for k, (s, d) in enumerate(zip(index, x.shape)):
        if not isinstance(s, slice):
            raise GraphError(f"index {s!r} on axis {k}: only slices are supported (use x[..., i:i+1] to keep "
                             f"the ANE's rank-4 layout)")
        b, e, st = s.indices(d)
        if st < 1 or e <= b:
            raise GraphError(f"slice {s} on axis {k} of x{list(x.shape)} is empty or reversed")
        begin.append(b), end.append(e), stride.append(st)
    if all(st == 1 for st in stride):
        return slice_by_size(x, begin, [e - b for b, e in zip(begin, end)])
    return slice_by_index(x, begin, end, stride)


@builder
def concat(values: Sequence[Value], axis: int, name=None) -> Value:
    vals = tuple(values)
    first = next((v for v in vals if isinstance(v, Value)), None)
    if first is None:
        raise GraphError("concat: needs Values")
    vals = tuple(as_value(v, first, "concat value") for v in vals)
    return make("concat", {"values": vals}, {"axis": _axis("concat", int(axis), first.rank, first.shape),
                                             "interleave": False}, name=name)


@builder
def scaled_dot_product_attention(query: Value, key: Value, value: Value, attn_mask=None, name=None) -> Value:
    inputs = {"query": query, "key": key, "value": value}
    if attn_mask is not None:
        inputs["attn_mask"] = as_value(attn_mask, query, "attn_mask")
    return make("scaled_dot_product_attention", inputs, name=name)


def evaluate_node(op: str, inputs: dict, attrs: dict) -> list[np.ndarray]:
    """Run the float64 reference of one op on numpy inputs."""
    d = OPS[op]
    if d.eval is None:
        raise GraphError(f"{op} has no reference implementation")
    return [np.asarray(r, dtype=np.float64) for r in d.eval(inputs, attrs)]


from .composites import (  # noqa: E402  (composites build on the builders above)
    causal_attention, causal_mask, layer_norm, linear, lora_branch, lora_linear, rms_norm, rope, rope_tables,
    swiglu_ffn,
)

BUILDERS.update({"causal_attention", "causal_mask", "layer_norm", "linear", "lora_branch", "lora_linear", "rms_norm",
                 "rope", "rope_tables", "swiglu_ffn", "getitem"})
