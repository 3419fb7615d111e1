"""Plans baking the same weight hold one copy of it (sim/shared_weights.h): a model's program sets bake the
same layers. Equal contents only - found by hash, compared exactly; results unchanged; the copy lives as long
as some plan holds it."""

from __future__ import annotations

import gc

import numpy as np

from compiler_helpers import sim_compile
from orion import _native
from orion.ir import Graph, ops


def _graph(w, s=16, scheme=None):
    g = Graph("baked")
    x = g.input("x", (1, w.shape[1], 1, s))
    g.output("y", ops.linear(x, g.weight("w", w, quant=scheme) if scheme else w))
    return g


def _counts():
    gc.collect()
    return _native.testing.sim_shared_weights()


def _forget_released():
    """The runtime keeps the last 8 compiled models warm (as the device's compile cache does): compile 8
    weightless ones so the released programs' models are gone."""
    for i in range(8):
        g = Graph(f"filler{i}")
        g.output("y", ops.relu(g.input("x", (1, 8 + i, 1, 16))))
        sim_compile(g).release()


def test_two_plans_of_one_weight_share_its_packed_copy():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((96, 64)) / 8
    _forget_released()                                          # earlier tests' warm models: not ours
    base = _counts()[0]
    a = sim_compile(_graph(w, s=16))
    assert _counts()[0] == base + 1
    b = sim_compile(_graph(w, s=64))                            # another "program set": other columns
    assert _counts()[0] == base + 1
    other = w.copy()
    other[95, 63] += 2 ** -6                                    # one element apart: its own copy
    c = sim_compile(_graph(other, s=16))
    assert _counts()[0] == base + 2
    x = rng.standard_normal((1, 64, 1, 64)).astype(np.float16)
    alone = sim_compile(_graph(w, s=64), dynamic_weights=True)  # weights as inputs: no packed constant
    np.testing.assert_array_equal(b(x=x)["y"], alone(x=x)["y"])
    np.testing.assert_array_equal(a(x=x[..., :16])["y"], b(x=x)["y"][..., :16])
    assert not np.array_equal(c(x=x[..., :16])["y"], a(x=x[..., :16])["y"])
    a.release()
    np.testing.assert_array_equal(b(x=x)["y"], alone(x=x)["y"])  # the survivor still holds it
    for p in (b, c, alone):
        p.release()
    _forget_released()
    assert _counts()[0] == base


def test_compressed_weights_are_shared_too():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 64)) / 8
    _forget_released()
    base = _counts()[1]
    a, b = sim_compile(_graph(w, 16, "int8")), sim_compile(_graph(w, 32, "int8"))
    assert _counts()[1] == base + 1
    x = rng.standard_normal((1, 64, 1, 32)).astype(np.float16)
    np.testing.assert_array_equal(a(x=x[..., :16])["y"], b(x=x)["y"][..., :16])
    a.release()
    b.release()
    _forget_released()
    assert _counts()[1] == base
