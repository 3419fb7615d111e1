"""cast_fusion: before/after — exact cast pairs removed, rounding pairs kept."""

from __future__ import annotations

from compiler_helpers import apply_passes, ops_of
from orion.ir import Graph, ops


def test_cast_fusion():
    g = Graph()
    x = g.input("x", (1, 16, 1, 16))
    widened = ops.cast(ops.cast(x, "fp32"), "fp16")              # exact: removed
    g.output("y", ops.exp(widened))
    x32 = g.input("x32", (1, 16, 1, 16), dtype="fp32")           # fp32 -> fp16 (rounds) -> fp32: kept
    g.output("z", ops.cast(x32, "fp32"))
    after, ctx = apply_passes(g, "cast_fusion", "dce")
    assert after.outputs["y"].node.inputs["x"] is after.inputs["x"]
    assert ops_of(after).count("cast") == 2
    assert ctx.stats["cast_fusion"]["pairs"] == 1
