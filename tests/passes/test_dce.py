"""dce: before/after — dead nodes dropped, program inputs kept."""

from __future__ import annotations

from compiler_helpers import apply_passes, ops_of
from orion.ir import Graph, ops


def test_dce_drops_dead_nodes_but_keeps_inputs():
    g = Graph()
    x = g.input("x", (1, 16, 1, 16))
    unused = g.input("unused", (1, 16, 1, 16))
    ops.exp(unused)
    ops.tanh(x)
    g.output("y", ops.sigmoid(x))
    after, ctx = apply_passes(g, "dce")
    assert ops_of(after) == ["sigmoid"]
    assert set(after.inputs) == {"x", "unused"} and ctx.stats["dce"]["removed"] == 2
