"""Common-subexpression elimination: nodes with the same op, operands and parameters compute the same
value once. Small constants merge by value; large ones only when they share the same array object
(hashing every weight would cost more than it saves)."""

from __future__ import annotations

import numpy as np

from ...ir.graph import Graph, Node
from .context import CompileContext

SMALL_CONST = 1 << 16   # elements: consts up to this size merge by value (rope tables, masks)


def _attr_key(v):
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes()) if v.size <= SMALL_CONST else ("array-id", id(v))
    if isinstance(v, (list, tuple)):
        return tuple(_attr_key(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _attr_key(x)) for k, x in v.items()))
    return (type(v).__name__, v)


def node_key(node: Node):
    if node.op == "input":
        return None
    if node.op == "const":
        quant = node.attrs.get("quant")                 # a compressed weight equals only itself (not decoded)
        if quant is not None:
            return ("const", node.out.dtype, node.out.shape, id(quant))
        return ("const", node.out.dtype, node.out.shape, _attr_key(np.asarray(node.attrs["value"])), None)
    ins = tuple((k, tuple(id(x) for x in v) if isinstance(v, tuple) else id(v)) for k, v in node.inputs.items())
    attrs = tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items()))
    return (node.op, ins, attrs)


def run(graph: Graph, ctx: CompileContext) -> None:
    seen: dict = {}

    def visit(node: Node):
        key = node_key(node)
        if key is None:
            return None
        prev = seen.get(key)
        if prev is None:
            seen[key] = node
            return None
        ctx.count("cse", node.op)
        return list(prev.outputs)

    graph.rewrite(visit)
