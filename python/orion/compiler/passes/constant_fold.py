"""Constant folding: evaluate ops whose operands are all constants (float64 numpy reference), and
remove multiplications by zero, which the ANE fails to compile after a reduction (C33).

``mul(x, 0)`` becomes ``sub(x, x)`` (same IEEE result: 0, or NaN where x is inf/NaN) — or, when the zero
broadcasts x to a bigger shape, ``add(sub(x, x), zeros)``. Folding never creates a constant larger than
``fold_max_elements`` or than its largest operand (no weight-size blow-up).
"""

from __future__ import annotations

import numpy as np

from ...ir import ops
from ...ir.graph import NP_DTYPES, Graph, GraphError, Node, expand_quantized
from ...ir.ops import OPS, evaluate_node
from ...quant import QuantizedArray
from ...quant.transpose import transpose_quantized
from .context import CompileContext


def _is_zero_const(v) -> bool:
    if not (v.is_const and v.dtype in ("fp16", "fp32")):
        return False
    with np.errstate(over="ignore"):
        return not np.any(np.asarray(v.data, np.float16))


def fold_mul_by_zero(node: Node):
    x, y = node.inputs["x"], node.inputs["y"]
    for a, z in ((x, y), (y, x)):
        if _is_zero_const(z) and not a.is_const:
            zeros = ops.sub(a, a)
            if zeros.shape == node.out.shape:
                return zeros if node.name is None else ops.identity(zeros, name=node.name)
            return ops.add(zeros, z, name=node.name)
    return None


def run(graph: Graph, ctx: CompileContext) -> None:
    limit = ctx.options.fold_max_elements

    def visit(node: Node):
        if node.op in ("input", "const"):
            return None
        if node.op == "mul":
            r = fold_mul_by_zero(node)
            if r is not None:
                ctx.count("constant_fold", "mul_by_zero")
                return r
        ins = list(node.input_values())
        if not ins or not all(v.is_const for v in ins) or OPS[node.op].eval is None:
            return None
        biggest = max(v.size for v in ins)
        if any(o.size > max(limit, biggest) for o in node.outputs):
            return None
        name = node.name or (ins[0].name if len(ins) == 1 else None)   # reshape(w1) stays "w1"
        if node.op in ("reshape", "transpose", "identity"):            # views: no float64 copy of a weight
            x = np.asarray(node.inputs["x"].data)
            r = (x.reshape(node.attrs["shape"]) if node.op == "reshape" else
                 x.transpose(node.attrs["perm"]) if node.op == "transpose" else x)
            ctx.count("constant_fold", node.op)
            out = graph.const(r, node.out.dtype, name=name, keep_dtype=True)
            q = node.inputs["x"].node.attrs.get("quant")
            if q is not None:               # a compressed weight stays compressed (linear's reshape, a backward's Wᵀ)
                try:
                    q = (transpose_quantized(q, node.attrs["perm"]) if node.op == "transpose"
                         else expand_quantized(q, r.shape, name or "weight"))
                    # decoded at each use, like Graph.weight's: no dense copy per weight while lowering
                    out.node.attrs.update(quant=q, value=QuantizedArray(q))
                except GraphError:
                    pass                                    # another layout: the dense fp16 values are used
            return out
        args = {k: (tuple(x.data for x in v) if isinstance(v, tuple) else v.data) for k, v in node.inputs.items()}
        with np.errstate(all="ignore"):
            results = evaluate_node(node.op, args, node.attrs)
        ctx.count("constant_fold", node.op)
        return [graph.const(r.reshape(o.shape).astype(np.float32 if o.dtype in ("fp16", "fp32") else NP_DTYPES[o.dtype]),
                            o.dtype, name=name)
                for r, o in zip(results, node.outputs)]

    graph.rewrite(visit)
