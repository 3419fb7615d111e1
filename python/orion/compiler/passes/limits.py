"""Size limits with automatic fixes where one exists.

C22 (axis <= 65,536): a conv whose output channels exceed it and that is returned (directly or after a
per-channel bias add) is split into chunks returned as separate program outputs, joined on the host.
C25 (conv input channels): contractions over more than ``conv_split_channels`` input channels become
several convs over channel slices plus adds. Everything else that exceeds a limit (C22, C23, C24) is
reported by ``validate`` with the constraint ID.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import ops
from ...ir.graph import Graph, Node
from .context import CompileContext, OutputPart


def _split_input_channels(node: Node, ctx: CompileContext):
    x, w = node.inputs["x"], node.inputs["weight"]
    cin = x.shape[1]
    lim = ctx.options.conv_split_channels
    if node.op != "conv" or cin <= lim or node.attrs["groups"] != 1 or not w.is_const or "bias" in node.inputs:
        return None
    n = math.ceil(cin / lim)
    step = math.ceil(cin / n)
    acc = None
    for a in range(0, cin, step):
        b = min(cin, a + step)
        xs = ops.slice_by_size(x, (0, a, 0, 0), (x.shape[0], b - a, x.shape[2], x.shape[3]))
        ws = ops.as_value(np.asarray(w.data)[:, a:b], w)
        y = ops.make("conv", {"x": xs, "weight": ws}, node.attrs)
        acc = y if acc is None else ops.add(acc, y)
    ctx.count("limits", "c25_split")
    return ops.identity(acc, name=node.name) if node.name else acc


def _chunk_output_convs(graph: Graph, ctx: CompileContext) -> None:
    lim = ctx.options.max_axis
    uses = graph.uses()
    for node in [n for n in graph.nodes if n.op == "conv" and n.out.shape[1] > lim]:
        out, bias = node.out, None
        consumers = uses.get(out, [])
        if len(consumers) == 1 and consumers[0][0].op == "add":
            add = consumers[0][0]
            other = add.inputs["y"] if add.inputs["x"] is out else add.inputs["x"]
            if other.is_const and other.size == out.shape[1] and not uses.get(add.out):
                bias, out = other, add.out
        elif consumers:
            continue
        keys = [k for k, v in graph.outputs.items() if v is out]
        if len(keys) != 1:
            continue
        key = keys[0]
        binding = next(b for b in ctx.io.outputs.values() if any(p.key == key for p in b.parts))
        if len(binding.parts) != 1:
            continue
        w = node.inputs["weight"]
        if not w.is_const:
            continue
        cout = node.out.shape[1]
        n = math.ceil(cout / lim)
        step = math.ceil(cout / n)
        parts, new_outputs = [], {}
        for k, v in graph.outputs.items():
            if k != key:
                new_outputs[k] = v
                continue
            for i, a in enumerate(range(0, cout, step)):
                b = min(cout, a + step)
                y = ops.make("conv", {"x": node.inputs["x"], "weight": ops.as_value(np.asarray(w.data)[a:b], w)},
                             node.attrs)
                if bias is not None:
                    y = ops.add(y, ops.as_value(np.asarray(bias.data).reshape(-1)[a:b].reshape(1, b - a, 1, 1), y))
                pk = f"{key}_chunk{i}"
                new_outputs[pk] = y
                parts.append(OutputPart(pk, y.shape))
        binding.parts, binding.concat_axis = parts, 1
        graph.outputs = new_outputs
        ctx.count("limits", "c22_chunks", len(parts))


def run(graph: Graph, ctx: CompileContext) -> None:
    graph.rewrite(lambda n: _split_input_channels(n, ctx) if n.op == "conv" else None)
    _chunk_output_convs(graph, ctx)
