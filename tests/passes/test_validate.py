"""validate: the last pass re-checks every MIL-level constraint, so a pipeline missing a fixing pass
fails with the constraint ID instead of producing a program the ANE rejects."""

from __future__ import annotations

import numpy as np
import pytest

from orion.compiler import lower
from orion.errors import CompileError
from orion.ir import Graph, ops
from orion.compiler.passes import default_pipeline


def _pipe(*drop):
    return [p for p in default_pipeline() if p not in drop]


@pytest.mark.parametrize("build,drop,cid", [
    (lambda x: ops.gelu(x), ("decompose",), "C10"),
    (lambda x: ops.rsqrt(x), ("decompose",), "C20"),
    (lambda x: ops.reduce_mean(x, [1]), ("decompose",), "C27"),
    (lambda x: ops.conv(x, np.ones((8, 64, 1, 1)), bias=np.ones(8)), ("decompose",), "C16"),
    (lambda x: ops.softmax(ops.reshape(x, (1, 64, 2, 48)), -1), ("decompose",), "C21"),
    (lambda x: ops.mul(ops.reduce_sum(x, [1]), 0.0), ("constant_fold",), "C33"),
    (lambda x: ops.conv(x, np.ones((8, 64, 1, 16)), pad_type="same"), (), "C24"),
])
def test_missing_fix_is_reported(build, drop, cid):
    g = Graph()
    x = g.input("x", (1, 64, 1, 96))
    g.output("y", build(x))
    with pytest.raises(CompileError) as e:
        lower(g, pipeline=_pipe(*drop))
    assert e.value.constraint == cid and e.value.statement


def test_silu_without_decompose():
    g = Graph()
    x = g.input("x", (1, 64, 1, 96))
    g.output("y", ops.silu(x))
    with pytest.raises(CompileError, match="silu"):
        lower(g, pipeline=_pipe("decompose"))


def test_computed_conv_weight_must_lower():
    g = Graph()
    x = g.input("x", (1, 64, 1, 96))
    w = g.input("w", (8, 64, 1, 1))
    g.output("y", ops.conv(x, w))
    assert "matmul" in lower(g).mil                     # lowered by dynamic_weights
    with pytest.raises(CompileError, match="must be a constant"):
        lower(g, pipeline=_pipe("dynamic_weights"))
