"""orion.ir.npmath: the one numpy tanh-GELU (and its constants) that the IR's op reference, the compiler's gelu
decomposition and the models' float64 reference share."""

from __future__ import annotations

import math

import numpy as np
from orion.ir import Graph, evaluate, npmath, ops


def test_gelu_tanh_is_the_tanh_approximation():
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 4.0])
    want = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in x]
    np.testing.assert_allclose(npmath.gelu_tanh(x), want, rtol=1e-14, atol=0)


def test_every_layer_takes_it_from_npmath():
    from orion.compiler.passes import decompose
    from orion.ir.ops import activation
    from orion.models import reference
    assert activation.gelu_tanh is npmath.gelu_tanh and reference.gelu_tanh is npmath.gelu_tanh
    assert (decompose.GELU_C, decompose.GELU_CUBIC) == (npmath.GELU_C, npmath.GELU_CUBIC)
    g = Graph()
    x = g.input("x", (1, 8, 1, 4))
    g.output("y", ops.gelu(x))
    a = np.random.default_rng(0).standard_normal((1, 8, 1, 4))
    np.testing.assert_array_equal(evaluate(g, {"x": a})["y"], npmath.gelu_tanh(a))
