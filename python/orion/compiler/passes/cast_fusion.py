"""Cast fusion: ``cast(cast(x, wide), b)`` where the inner cast widens (fp16 → fp32) is exact to fold:
to x when b is x's dtype, else to one ``cast(x, b)``. A narrowing inner cast (fp32 → fp16) rounds, so
that pair is kept."""

from __future__ import annotations

from ...ir import ops
from ...ir.graph import Graph, Node
from .context import CompileContext

_WIDTH = {"fp16": 2, "fp32": 4}


def run(graph: Graph, ctx: CompileContext) -> None:
    def visit(node: Node):
        if node.op != "cast" or node.inputs["x"].op != "cast":
            return None
        inner = node.inputs["x"].node
        src = inner.inputs["x"]
        if _WIDTH.get(inner.out.dtype, 0) <= _WIDTH.get(src.dtype, 99):
            return None                      # inner cast narrows: not exact
        ctx.count("cast_fusion", "pairs")
        target = node.attrs["dtype"]
        return src if src.dtype == target else ops.cast(src, target, name=node.name)

    graph.rewrite(visit)
