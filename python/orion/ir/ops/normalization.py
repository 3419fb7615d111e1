"""The MIL ``layer_norm`` op. ``ops.layer_norm`` stays the composite (centre, pre-scale, pow(-0.5):
proven on the ANE); this builder emits the fused op, whose ANE support is only reported (C38)."""

from __future__ import annotations

import numpy as np

from ..graph import Value
from ._core import REQUIRED, _norm_axes, as_value, define, make


def _ev_layer_norm(i, a):
    x, axes = i["x"], tuple(a["axes"])
    xc = x - x.mean(axis=axes, keepdims=True)
    y = xc / np.sqrt((xc * xc).mean(axis=axes, keepdims=True) + a["epsilon"])
    shape = tuple(x.shape[k] if k in axes else 1 for k in range(x.ndim))
    if "gamma" in i:
        y = y * i["gamma"].reshape(shape)
    if "beta" in i:
        y = y + i["beta"].reshape(shape)
    return [y]


define("layer_norm", _ev_layer_norm, "epsilon dtype must equal gamma dtype (C38)",
       attrs={"axes": REQUIRED, "epsilon": 1e-5})


def layer_norm(x: Value, axes, gamma=None, beta=None, epsilon: float = 1e-5, name=None) -> Value:
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over ``axes``; gamma/beta have shape x.shape[axes]."""
    axes = tuple(sorted(_norm_axes("layer_norm", x, axes)))
    inputs = {"x": x}
    for p, v in (("gamma", gamma), ("beta", beta)):
        if v is not None:
            inputs[p] = as_value(v if isinstance(v, Value) else np.asarray(v, np.float32), x, f"layer_norm {p}")
    return make("layer_norm", inputs, {"axes": axes, "epsilon": float(epsilon)}, name=name)
