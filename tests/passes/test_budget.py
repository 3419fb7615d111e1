"""budget: weight files / tensors per program (C18/C19) and the SRAM estimate (C26)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler_helpers import apply_passes
from orion.errors import CompileError
from orion.ir import Graph, ops
from orion.compiler.passes import CompileWarning
from orion.compiler.passes.budget import sram_estimate


def _weights(n, pow_=False, scalar_add=False):
    g = Graph()
    x = g.input("x", (1, 64, 1, 64))
    y = x
    for i in range(n):
        y = ops.mul(y, g.weight(f"w{i}", np.full((1, 64, 1, 1), 2.0)))
    if pow_:
        y = ops.pow(y, 2.0)
    if scalar_add:
        y = ops.add(y, 1.0)
    g.output("y", y)
    return g


@pytest.mark.parametrize("layout,count_tensors,n,ok", [
    ("multi", False, 40, True),          # one file: fine however many tensors
    ("multi", True, 17, False),          # strict simulator profile counts tensors
    ("per_tensor", False, 16, True),
    ("per_tensor", False, 17, False),
])
def test_weight_slots(layout, count_tensors, n, ok):
    g = _weights(n)
    if ok:
        _, ctx = apply_passes(g, "names", "budget", weight_layout=layout, count_weight_tensors=count_tensors)
        assert ctx.weight_files == (1 if layout == "multi" and not count_tensors else n)
    else:
        with pytest.raises(CompileError) as e:
            apply_passes(g, "names", "budget", weight_layout=layout, count_weight_tensors=count_tensors)
        assert e.value.constraint == "C18" and "split the graph" in str(e.value)


@pytest.mark.parametrize("kind", ["pow", "scalar_add"])
def test_penalty_ops_lower_the_limit(kind):
    g = _weights(16, pow_=kind == "pow", scalar_add=kind == "scalar_add")
    with pytest.raises(CompileError) as e:
        apply_passes(g, "names", "budget", weight_layout="per_tensor")
    assert e.value.constraint == "C19" and "costs one slot" in str(e.value)


def test_sram_estimate_and_warning():
    g = Graph()
    x = g.input("x", (1, 1024, 1, 256))
    g.output("y", ops.linear(x, np.zeros((2048, 1024), np.float16)))
    est = sram_estimate(g)
    assert est == 2048 * 1024 * 2 + (1024 + 2048) * 256 * 2
    with pytest.warns(CompileWarning, match="C26"):
        apply_passes(g, "budget", sram_warn_bytes=4 * 2 ** 20)
