"""Decompose ops the ANE rejects or that are disputed into ops it runs (the ops whose schema row names a
lowering, ``orion.ops.schema()``, plus the conditional rewrites).

gelu → tanh form (C10) · silu → x·sigmoid(x) · rsqrt → pow(x, −0.5) (C20) · real_div → mul by a
reciprocal · reduce_mean → reduce_sum × 1/N (C27) · conv bias → separate add (C16) · SDPA → explicit
masked attention (C06/C45) · last-axis non-power-of-two softmax → exp(x − max)/sum (C21) · concat →
several program outputs joined on the host, or a CompileError with a suggestion (C01).
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import ops
from ...ir.graph import Graph, Node
from ...ir.npmath import GELU_C, GELU_CUBIC
from .context import CompileContext, OutputPart, compile_error


def _gelu(node: Node, ctx):
    x = node.inputs["x"]
    x3 = ops.mul(ops.mul(x, x), x)
    t = ops.tanh(ops.mul(ops.add(x, ops.mul(x3, GELU_CUBIC)), GELU_C))
    return ops.mul(ops.mul(x, 0.5), ops.add(t, 1.0), name=node.name)


def _silu(node: Node, ctx):
    x = node.inputs["x"]
    return ops.mul(x, ops.sigmoid(x), name=node.name)


def _rsqrt(node: Node, ctx):
    return ops.pow(node.inputs["x"], -0.5, name=node.name)


def _real_div(node: Node, ctx):
    x, y = node.inputs["x"], node.inputs["y"]
    if y.is_const:
        with np.errstate(divide="ignore"):
            recip = ops.as_value(np.asarray(1.0 / y.data.astype(np.float64), np.float32), y)
        return ops.mul(x, recip, name=node.name)
    return ops.mul(x, ops.pow(y, -1.0), name=node.name)


def _reduce_mean(node: Node, ctx):
    x = node.inputs["x"]
    axes, keep = node.attrs["axes"], node.attrs["keep_dims"]
    n = int(np.prod([x.shape[a] for a in axes]))
    s = ops.reduce_sum(x, axes, keep_dims=keep)
    return ops.mul(s, 1.0 / n, name=node.name)


def _conv(node: Node, ctx):
    if "bias" not in node.inputs:
        return None
    inputs = dict(node.inputs)
    bias = inputs.pop("bias")
    y = ops.make("conv", inputs, node.attrs)
    cout = y.shape[1]
    b = bias if bias.shape == (1, cout, 1, 1) else ops.reshape(bias, (1, cout, 1, 1))
    return ops.add(y, b, name=node.name)


def _sdpa(node: Node, ctx):
    q, k, v = node.inputs["query"], node.inputs["key"], node.inputs["value"]
    s = ops.matmul(ops.mul(q, 1.0 / math.sqrt(q.shape[-1])), k, transpose_y=True)  # scale Q first (C36)
    if "attn_mask" in node.inputs:
        s = ops.add(s, node.inputs["attn_mask"])
    return ops.matmul(_softmax_value(s, s.rank - 1, ctx), v, name=node.name)


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _explicit_softmax(x, axis, name=None):
    e = ops.exp(ops.sub(x, ops.reduce_max(x, [axis])))
    return ops.mul(e, ops.pow(ops.reduce_sum(e, [axis]), -1.0), name=name)


def _softmax_value(x, axis, ctx, name=None):
    if ctx.options.softmax_pow2 and axis == x.rank - 1 and not _is_pow2(x.shape[axis]):
        ctx.count("decompose", "softmax_c21")
        return _explicit_softmax(x, axis, name)
    return ops.softmax(x, axis, name=name)


def _softmax(node: Node, ctx):
    x, axis = node.inputs["x"], node.attrs["axis"]
    if ctx.options.softmax_pow2 and axis == x.rank - 1 and not _is_pow2(x.shape[axis]):
        ctx.count("decompose", "softmax_c21")
        return _explicit_softmax(x, axis, node.name)
    return None


# One rule per op whose schema row names a lowering (the op is never emitted; tests check the two agree),
# plus the conditional ones: conv with bias (C16), last-axis non-power-of-two softmax (C21).
LOWERINGS = {
    "gelu": _gelu, "silu": _silu, "rsqrt": _rsqrt, "real_div": _real_div, "reduce_mean": _reduce_mean,
    "scaled_dot_product_attention": _sdpa,
}
RULES = {**LOWERINGS, "conv": _conv, "softmax": _softmax}


def _split_concat_outputs(graph: Graph, ctx: CompileContext) -> None:
    """A concat that is only returned becomes one program output per operand (C01): the compiled
    program joins them on the host, so the caller still receives one array."""
    uses = graph.uses()
    for node in [n for n in graph.nodes if n.op == "concat"]:
        out, wrap = node.out, None
        consumers = uses.get(out, [])
        if len(consumers) == 1 and consumers[0][0].op in ("cast", "identity") and not uses.get(consumers[0][0].out):
            wrap = consumers[0][0]               # concat -> cast -> output: cast each piece instead
            out = wrap.out
        keys = [k for k, v in graph.outputs.items() if v is out]
        if not keys or (wrap is None and consumers):
            continue
        axis = node.attrs["axis"]
        new_outputs = {}
        for k, v in graph.outputs.items():
            if v is not out:
                new_outputs[k] = v
                continue
            binding = next(b for b in ctx.io.outputs.values() if any(p.key == k for p in b.parts))
            if len(binding.parts) != 1:
                raise compile_error(f"output {binding.name!r}: nested concat outputs are not supported; return "
                                    f"the pieces as separate outputs", "C01", k)
            parts = []
            for i, piece in enumerate(node.inputs["values"]):
                if wrap is not None:
                    piece = ops.make(wrap.op, {"x": piece}, wrap.attrs)
                pk = f"{k}_part{i}"
                new_outputs[pk] = piece
                parts.append(OutputPart(pk, piece.shape))
            binding.parts, binding.concat_axis = parts, axis
            ctx.count("decompose", "concat_to_outputs")
        graph.outputs = new_outputs
        graph.nodes.remove(node)                 # now dead: nothing else used it
        if wrap is not None:
            graph.nodes.remove(wrap)


def run(graph: Graph, ctx: CompileContext) -> None:
    _split_concat_outputs(graph, ctx)

    def visit(node: Node):
        rule = RULES.get(node.op)
        if rule is None:
            return None
        result = rule(node, ctx)
        if result is not None:
            ctx.count("decompose", node.op)
        return result

    # iterate until stable: a rule may emit ops another rule lowers (sdpa → softmax, ...)
    for _ in range(4):
        if not graph.rewrite(visit):
            break
    if not ctx.options.allow_concat:
        for n in graph.nodes:
            if n.op == "concat":
                raise compile_error(
                    f"{n.describe()}: concat is rejected by the ANE compiler in some forms and feeds other ops "
                    f"here; return the pieces as separate outputs (the compiled program joins concat outputs on "
                    f"the host), pack them on the CPU into one input, or pass allow_concat=True to emit the full "
                    f"form (named axis + interleave) that compiles on M1-M5 per maderix", "C01", n.name)
