"""Identity elimination: remove ops that return their operand unchanged and merge layout chains.

identity(x), cast to x's own dtype, reshape to x's own shape, identity transposes and full slices,
``x + 0``, ``x - 0``, ``x * 1``, ``x / 1``, ``x ** 1`` (only when the result has x's shape: no broadcast)
→ x; ``reshape(reshape(x))`` → one reshape; ``transpose(transpose(x))`` → one transpose (or x).
Outputs are redirected by name, so removing the op that produced an output never renames it
(Orion's defect 4.1); io_legalize re-adds an ``identity`` where an output would be a parameter (C17).
"""

from __future__ import annotations

import numpy as np

from ...ir import ops
from ...ir.graph import Graph, Node, Value
from .context import CompileContext


def _const_equal(v: Value, scalar: float) -> bool:
    if not (v.is_const and v.dtype in ("fp16", "fp32")):
        return False
    with np.errstate(over="ignore"):
        return bool(np.all(np.asarray(v.data, np.float16) == scalar))


def _same(a: Value, out: Value) -> bool:
    return a.shape == out.shape and a.dtype == out.dtype


def simplify(node: Node):
    out = node.out
    op = node.op
    if op == "identity":
        return node.inputs["x"]
    if op in ("cast", "reshape") and _same(node.inputs["x"], out):
        return node.inputs["x"]
    if op == "reshape":
        x = node.inputs["x"]
        if x.op == "reshape":
            return ops.reshape(x.node.inputs["x"], out.shape, name=node.name)
        return None
    if op == "transpose":
        x, perm = node.inputs["x"], tuple(node.attrs["perm"])
        if perm == tuple(range(len(perm))):
            return x
        if x.op == "transpose":
            inner = x.node.attrs["perm"]
            combined = tuple(inner[p] for p in perm)
            src = x.node.inputs["x"]
            return src if combined == tuple(range(len(combined))) else ops.transpose(src, combined, name=node.name)
        return None
    if op in ("slice_by_size", "slice_by_index") and _same(node.inputs["x"], out):
        return node.inputs["x"]
    if op in ("add", "sub", "mul", "real_div", "pow"):
        x, y = node.inputs["x"], node.inputs["y"]
        neutral = 0.0 if op in ("add", "sub") else 1.0
        if _const_equal(y, neutral) and _same(x, out):
            return x
        if op in ("add", "mul") and _const_equal(x, neutral) and _same(y, out):
            return y
    return None


def run(graph: Graph, ctx: CompileContext) -> None:
    def visit(node: Node):
        r = simplify(node)
        if r is None:
            return None
        returned = [v for v in graph.outputs.values()]
        if any(v is node.out for v in returned) and (r.op in ("input", "const") or any(v is r for v in returned)):
            return None                      # an output must stay a distinct op result (C17)
        ctx.count("identity_elim", node.op)
        return r

    for _ in range(8):
        if not graph.rewrite(visit):
            break
