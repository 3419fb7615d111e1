"""Element-wise ops: binary with numpy broadcasting (add, sub, mul, real_div, pow, maximum, minimum),
unary math (exp, sqrt, rsqrt, log, tanh), cast and select."""

from __future__ import annotations

import numpy as np

from ..graph import GraphError, Value
from ._core import BUILDERS, OPS, REQUIRED, _errstate, _graph_of, as_value, builder, define, make

# ------------------------------------------------------------------------------------------ binary

_BINARY = {
    "add": (np.add, "add against a scalar const costs one weight slot (C19)"),
    "sub": (np.subtract, ""),
    "mul": (np.multiply, "mul(reduce_result, 0) fails to compile (C33) - constant folding removes multiplications "
                         "by zero"),
    "real_div": (np.divide, "unused on the ANE by reference kernels"),
    "pow": (np.power, "used as pow(v, -0.5) for every norm; costs one weight slot (C19)"),
    "maximum": (np.maximum, ""),
    "minimum": (np.minimum, ""),
}
for _n, (_f, _note) in _BINARY.items():
    define(_n, _errstate(lambda i, a, f=_f: [f(i["x"], i["y"])]), "numpy broadcasting. " + _note)


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
@builder
def maximum(x, y, name=None): return _binary("maximum", x, y, name)
@builder
def minimum(x, y, name=None): return _binary("minimum", x, y, name)


# ------------------------------------------------------------------------------------------- unary

def _unary(op):
    def fn(x: Value, name=None) -> Value:
        return make(op, {"x": x}, name=name)
    fn.__name__ = op
    fn.__doc__ = OPS[op].ane
    BUILDERS[op] = fn
    return fn


def define_unary(table: dict) -> list:
    """Registers ``{op: (numpy reference, note)}`` ops on x alone; returns their builders in order."""
    for n, (f, note) in table.items():
        define(n, _errstate(lambda i, a, f=f: [f(i["x"])]), note)
    return [_unary(n) for n in table]


exp, sqrt, tanh, rsqrt = define_unary({
    "exp": (np.exp, "compiles (fork probe)"),
    "sqrt": (np.sqrt, "compiles (fork probe)"),
    "tanh": (np.tanh, "used by the tanh GELU"),
    "rsqrt": (lambda x: 1.0 / np.sqrt(x), "rejected by the ANE compiler even without weights"),
})

define("log", _errstate(lambda i, a: [np.log(i["x"] + a["epsilon"])]),
       "ANEForge: pass epsilon explicitly (the 1e-45 default underflows in fp16), so it is always emitted",
       attrs={"epsilon": 0.0})


@builder
def log(x: Value, epsilon: float = 0.0, name=None) -> Value:
    return make("log", {"x": x}, {"epsilon": float(epsilon)}, name=name)


# -------------------------------------------------------------------------------------------- cast

# The simulator casts to more dtypes; the IR's numpy reference (_ev_cast) models these three.
_CAST_TARGETS = ("fp16", "fp32", "int32")


def _ev_cast(i, a):
    x = i["x"]
    return [np.trunc(x) if a["dtype"] == "int32" else x.astype(np.float64)]


define("cast", _ev_cast, "fp32 I/O + cast works on M3+, rejected on M1/M2 (C28: the ios16 target "
       "converts on the host)", attrs={"dtype": REQUIRED})


@builder
def cast(x: Value, dtype: str, name=None) -> Value:
    if dtype not in _CAST_TARGETS:
        raise GraphError(f"cast: unsupported target dtype {dtype!r} ({', '.join(_CAST_TARGETS)})")
    return make("cast", {"x": x}, {"dtype": dtype}, name=name)


# ------------------------------------------------------------------------------------------ select

define("select", lambda i, a: [np.where(np.asarray(i["cond"]) != 0, i["a"], i["b"])],
       "cond is a bool const (bool tensors are never program I/O, C39)")


@builder
def select(cond, a, b, name=None) -> Value:
    """``cond ? a : b`` with three-way broadcasting; ``cond``: a bool array (baked) or a bool Value."""
    like = a if isinstance(a, Value) else b
    if not isinstance(like, Value):
        raise GraphError("select: a or b must be a graph Value")
    a, b = as_value(a, like, "select a"), as_value(b, like, "select b")
    if not isinstance(cond, Value):
        arr = np.asarray(cond)
        if arr.dtype != np.bool_:
            raise GraphError(f"select: cond must be a bool array or Value, got dtype {arr.dtype}")
        cond = like.node.graph.const(arr, dtype="bool")
    return make("select", {"cond": cond, "a": a, "b": b}, name=name)
