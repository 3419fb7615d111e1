"""Reductions over axes: reduce_sum, reduce_mean, reduce_max, reduce_min, reduce_prod (the IR keeps
``keep_dims=True`` by default: the [1, 1, 1, S] shapes every ANE kernel uses)."""

from __future__ import annotations

import numpy as np

from ..graph import Value
from ._core import BUILDERS, OPS, REQUIRED, _norm_axes, define, make


def _reduce(fn):
    def ev(i, a):
        return [fn(i["x"], axis=tuple(a["axes"]), keepdims=a["keep_dims"])]
    return ev


def _reducer(op):
    def fn(x: Value, axes, keep_dims: bool = True, name=None) -> Value:
        return make(op, {"x": x}, {"axes": _norm_axes(op, x, axes), "keep_dims": bool(keep_dims)}, name=name)
    fn.__name__ = op
    fn.__doc__ = OPS[op].ane + " (keep_dims defaults to True: the [1, 1, 1, S] shapes every ANE kernel uses)"
    BUILDERS[op] = fn
    return fn


for _n, _f, _note in (
        ("reduce_sum", np.sum, "used by every norm (axis 1); axes and keep_dims as named consts"),
        ("reduce_mean", np.mean, "decompose emits reduce_sum * (1/N)"),
        ("reduce_max", np.max, "in Orion's codegen, no production use"),
        ("reduce_min", np.min, ""),
        ("reduce_prod", np.prod, "")):
    define(_n, _reduce(_f), _note, attrs={"axes": REQUIRED, "keep_dims": True})

reduce_sum = _reducer("reduce_sum")
reduce_mean = _reducer("reduce_mean")
reduce_max = _reducer("reduce_max")
reduce_min = _reducer("reduce_min")
reduce_prod = _reducer("reduce_prod")
