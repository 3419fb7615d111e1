"""Activations: sigmoid, relu, silu, gelu (tanh form), clip, softmax."""

from __future__ import annotations

import numpy as np

from ..graph import Value
from ..npmath import GELU_C, GELU_CUBIC, gelu_tanh
from ._core import REQUIRED, _axis, builder, define, make
from .elementwise import define_unary

sigmoid, relu, gelu, silu = define_unary({
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), "used by SiLU = x*sigmoid(x)"),
    "relu": (lambda x: np.maximum(x, 0.0), "in Orion's op set; no production use"),
    "gelu": (gelu_tanh,
             f"tanh approximation 0.5x(1+tanh({GELU_C:.5f}(x+{GELU_CUBIC}x^3))); rejected on the in-memory path"),
    "silu": (lambda x: x / (1.0 + np.exp(-x)), "treated as unsupported"),
})


define("clip", lambda i, a: [np.clip(i["x"], a["alpha"], a["beta"])],
       "no reference use on the in-memory path", attrs={"alpha": REQUIRED, "beta": REQUIRED})


@builder
def clip(x: Value, alpha: float, beta: float, name=None) -> Value:
    return make("clip", {"x": x}, {"alpha": float(alpha), "beta": float(beta)}, name=name)


def _softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


define("softmax", lambda i, a: [_softmax(i["x"], a["axis"])],
       "axis as a named int32 const; a non-power-of-two last axis is disputed (C21): decompose rewrites that case "
       "as exp(x - max) / sum", attrs={"axis": -1})


@builder
def softmax(x: Value, axis: int = -1, name=None) -> Value:
    return make("softmax", {"x": x}, {"axis": _axis("softmax", int(axis), x.rank, x.shape)}, name=name)
