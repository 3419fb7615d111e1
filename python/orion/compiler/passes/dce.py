"""Dead-code elimination: drop every node no output depends on. Program inputs always stay (callers
pass them by name); outputs always reference live values, so the return tuple never names a removed
value (C17)."""

from __future__ import annotations

from ...ir.graph import Graph
from .context import CompileContext


def run(graph: Graph, ctx: CompileContext) -> None:
    live: set[int] = set()
    stack = list(graph.outputs.values())
    while stack:
        v = stack.pop()
        if id(v.node) in live:
            continue
        live.add(id(v.node))
        stack.extend(v.node.input_values())
    before = len(graph.nodes)
    graph.nodes[:] = [n for n in graph.nodes if id(n) in live or n.op == "input"]
    removed = before - len(graph.nodes)
    if removed:
        ctx.count("dce", "removed", removed)
