"""cse: before/after — duplicate subexpressions and equal small constants merged."""

from __future__ import annotations

import numpy as np

from compiler_helpers import apply_passes, ops_of, same_result
from orion.ir import Graph, ops


def test_cse_merges_duplicates():
    g = Graph()
    x = g.input("x", (1, 16, 1, 16))
    a = ops.exp(ops.mul(x, 2.0))
    b = ops.exp(ops.mul(x, 2.0))
    g.output("y", ops.add(a, b))
    after, ctx = apply_passes(g, "cse", "dce")
    assert ops_of(after) == ["mul", "exp", "add"]
    assert sum(1 for n in after.nodes if n.op == "const") == 1     # the two 2.0 scalars merged by value
    same_result(g, after)


def test_cse_large_consts_merge_only_by_identity():
    g = Graph()
    x = g.input("x", (1, 64, 1, 2048))
    w = np.ones((1, 64, 1, 2048), np.float32)                  # > 65,536 elements: merged by identity only
    y = ops.add(ops.mul(x, w), ops.mul(x, w.copy()))            # equal values, different arrays: kept
    z = ops.add(ops.mul(x, w), ops.mul(x, w))                   # same array: merged
    g.output("y", y)
    g.output("z", z)
    after, _ = apply_passes(g, "cse", "dce")
    assert sum(1 for n in after.nodes if n.op == "const") == 2
