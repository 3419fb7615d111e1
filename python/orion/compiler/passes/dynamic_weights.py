"""Weights as program inputs (the ``dynamic`` strategy of :mod:`orion.weight_updates`): compile once, update by writing
surfaces — no compile, no reload (C07 makes baked weights immutable).

A weight is dynamic when ``g.weight(..., dynamic=True)`` or ``compile(dynamic_weights=True | [names])``.
* Used only as 1x1 conv weights → input ``[1, IC, 1, OC]`` (Wᵀ) and the documented matmul idiom:
  reshape x → [1,1,IC,S], transpose → [1,1,S,IC], matmul with W [1,1,IC,OC], transpose back, reshape
  → [1,OC,1,S]. With ``pack_dynamic_weights`` several such weights with the same IC share one input
  surface along its last axis and are cut out with ``slice_by_size`` (never on M1/M2: C35).
* With ``panel_dynamic_weights`` such weights are laid out in column panels instead, ``[1, OC/W, IC, W]``
  (panel p holds output channels p*W.., each k-major; W the widest of :data:`PANEL_WIDTHS` that divides
  every such OC, a weight whose OC it does not divide keeps the row layout), and the conv is one batched
  matmul ``[1,P,IC,W]ᵀ x [1,1,IC,S] -> [1,P,W,S]`` (x broadcast over the panels), which is already the conv's
  ``[1, OC, 1, S]``: no transposes, the same fma chains and results. Why: decode multiplies one column by the
  whole weight; in ``[1, IC, 1, OC]`` a pass over a strip of columns reads a short piece of every one of the
  IC rows (a strided walk the prefetchers do not follow), in panels it reads each panel front to back.
  With ``pack_dynamic_weights`` panel weights with the same IC share inputs stacked on the panel axis, filled
  up to the size of the largest such weight (C12 pads every input to the largest), and per-channel vectors
  (norm weights, biases: ``[1, C, 1, 1]``) share one input on the channel axis: contiguous slices.
* Any other use → an input holding the weight as is (viewed as [1, C, 1, S]); a conv consuming a
  non-const weight is lowered to ``matmul(W[1,1,OC,IC], x[1,1,IC,S])``.
"""

from __future__ import annotations

import numpy as np

from ...errors import InputError
from ...ir import ops
from ...ir.graph import Graph, Node, Value
from .context import CompileContext, DynamicWeight, InputBinding, compile_error


def _selected(graph: Graph, ctx: CompileContext) -> list[str]:
    want = ctx.options.dynamic_weights
    names = [n for n, v in graph.weights.items() if v.node.attrs.get("dynamic")]
    if want is True:
        names = list(graph.weights)
    elif want:
        want = [want] if isinstance(want, str) else list(want)
        unknown = [n for n in want if n not in graph.weights]
        if unknown:
            raise InputError(f"dynamic_weights: unknown weight name(s) {unknown}; the graph's weights are "
                             f"{sorted(graph.weights)}")
        names += [n for n in want if n not in names]
    return [n for n in graph.weights if n in names and graph.weights[n].node.op == "const"]


def _is_pointwise_conv(n: Node) -> bool:
    w = n.inputs["weight"]
    a = n.attrs
    return (w.rank == 4 and w.shape[2:] == (1, 1) and a["groups"] == 1 and tuple(a["strides"]) == (1, 1)
            and (a["pad_type"] != "custom" or not any(a["pad"])) and "bias" not in n.inputs
            and n.inputs["x"].shape[0] == 1)


def _conv_weight_uses(w: Value, uses) -> list[Node] | None:
    """The conv nodes using ``w`` as their weight (directly or through a reshape to [OC, IC, 1, 1]);
    None if ``w`` has any other use."""
    convs = []
    for node, param in uses.get(w, []):
        if node.op == "conv" and param == "weight" and _is_pointwise_conv(node):
            convs.append(node)
        elif node.op == "reshape" and len(node.out.shape) == 4 and node.out.shape[2:] == (1, 1):
            inner = _conv_weight_uses(node.out, uses)
            if inner is None:
                return None
            convs += inner
        else:
            return None
    return convs


# Output channels per panel, widest first: 64 fp16 = 128 bytes, two cache lines per k, and a single-row
# product keeps 4 vector accumulators per panel busy (a 2-core AVX-512 box streamed 26-28 GB/s from one
# core at 64, 19 at 16). 64 divides the widths of the families' real models (576, 192, 1536, 896, 4864,
# 2048, ...); the narrower ones serve tiny test models.
PANEL_WIDTHS = (64, 32, 16)


def _panel_width(ocs) -> int:
    """The widest panel dividing every OC (the widest overall when none does: the others keep rows)."""
    return next((w for w in PANEL_WIDTHS if all(oc % w == 0 for oc in ocs)), PANEL_WIDTHS[0])


def _matmul_idiom(x: Value, w_t: Value, oc: int, name: str | None) -> Value:
    """conv1x1(x, W) with W given as [1, IC, 1, OC], by the matmul idiom of the module docstring."""
    _, ic, h, wd = x.shape
    s = h * wd
    xt = ops.transpose(ops.reshape(x, (1, 1, ic, s)), (0, 1, 3, 2))           # [1, 1, S, IC]
    y = ops.matmul(xt, ops.reshape(w_t, (1, 1, ic, oc)))                      # [1, 1, S, OC]
    return ops.reshape(ops.transpose(y, (0, 1, 3, 2)), (1, oc, h, wd), name=name)


def _panel_idiom(x: Value, w_p: Value, oc: int, name: str | None) -> Value:
    """conv1x1(x, W) with W given as panels [1, OC/W, IC, W] (module docstring): panel p transposed times
    x is output channels p*W.. of every column, so the result is already [1, OC, 1, S] - no transposes."""
    _, ic, h, wd = x.shape
    y = ops.matmul(w_p, ops.reshape(x, (1, 1, ic, h * wd)), transpose_x=True)   # [1, P, W, S]
    return ops.reshape(y, (1, oc, h, wd), name=name)


def lower_conv_with_tensor_weight(node: Node) -> Value:
    """conv whose weight is not a const (the ANE needs const conv weights): W·X as a matmul."""
    if not _is_pointwise_conv(node):
        raise compile_error(f"{node.describe()}: a conv whose weight is not a constant (dynamic or computed) must "
                            f"be 1x1, stride 1, groups 1, unpadded and batch 1 to lower to matmul", None, node.name)
    x, w = node.inputs["x"], node.inputs["weight"]
    _, ic, h, wd = x.shape
    oc = w.shape[0]
    y = ops.matmul(ops.reshape(w, (1, 1, oc, ic)), ops.reshape(x, (1, 1, ic, h * wd)))   # [1, 1, OC, S]
    return ops.reshape(y, (1, oc, h, wd), name=node.name)


def _const_derived(v: Value) -> bool:
    """A value constant folding will turn into a const (e.g. reshape of a baked weight)."""
    while not v.is_const:
        if v.op not in ("reshape", "transpose", "identity", "cast"):
            return False
        v = v.node.inputs["x"]
    return True


def _needs_matmul(n: Node) -> bool:
    w = n.inputs["weight"] if n.op == "conv" else None
    return w is not None and w.op not in ops.BAKED and not _const_derived(w)   # constexpr weights stay baked


def _panel_bins(graph: Graph, names: list[str]) -> list[tuple[int, list[str]]]:
    """Panel weights with the same IC packed into inputs of at most the largest panel weight's bytes (C12
    pads every input of a program to the largest one's size, so smaller weights alone would each cost
    that much): first fit in decreasing size. Only bins of two or more weights are returned."""
    cap = max((graph.weights[n].shape[0] * graph.weights[n].shape[1] for n in names), default=0)
    by_ic: dict[int, list[str]] = {}
    for n in names:
        by_ic.setdefault(graph.weights[n].shape[1], []).append(n)
    out = []
    for ic, members in by_ic.items():
        bins: list[list[str]] = []
        room: list[int] = []
        for n in sorted(members, key=lambda m: -graph.weights[m].shape[0]):
            oc = graph.weights[n].shape[0]
            i = next((i for i, r in enumerate(room) if r >= oc), None)
            if i is None:
                bins.append([n])
                room.append(max(cap // ic, oc) - oc)
            else:
                bins[i].append(n)
                room[i] -= oc
        out += [(ic, b) for b in bins if len(b) > 1]
    return out


def _unique_key(graph: Graph, ctx: CompileContext, stem: str) -> str:
    taken = set(graph.inputs) | set(graph.outputs) | set(graph.weights) | set(ctx.io.inputs)
    key, k = stem, 1
    while key in taken:
        key, k = f"{stem}_{k}", k + 1
    return key


def _plan_surfaces(graph: Graph, ctx: CompileContext, names: list[str], conv_t: dict, panel: set, width: int):
    """Where each dynamic weight lives: ``layout`` name -> (input key, the input's shape, offset on the packed
    axis), ``axis`` name -> that axis for packed weights, ``shapes`` name -> the weight's own surface shape.
    Registers the inputs in ``ctx.io.inputs``."""
    def own_shape(name: str) -> tuple:
        w = graph.weights[name]
        if name in panel:
            return (1, w.shape[0] // width, w.shape[1], width)
        if name in conv_t:
            return (1, w.shape[1], 1, w.shape[0])
        if w.rank == 4 and w.shape[0] == 1 and w.shape[2] == 1:
            return w.shape
        return (1, int(np.prod(w.shape[:-1])) if w.rank > 1 else 1, 1, w.shape[-1])

    shapes = {n: own_shape(n) for n in names}
    layout: dict[str, tuple[str, tuple, int]] = {}
    axis: dict[str, int] = {}

    def packed(stem: str, members: list[str], ax: int) -> None:
        """``members`` stacked on axis ``ax`` of one new input, in order."""
        full = list(shapes[members[0]])
        full[ax] = sum(shapes[m][ax] for m in members)
        key, off = _unique_key(graph, ctx, stem), 0
        for m in members:
            layout[m], axis[m] = (key, tuple(full), off), ax
            off += shapes[m][ax]
        ctx.io.inputs[key] = InputBinding(key, key, tuple(full), "fp16", kind="weight")

    if ctx.options.pack_dynamic_weights:
        if not ctx.options.legacy:       # [1, IC, 1, OC] weights on the width axis (C35 on M1/M2)
            rows: dict[int, list[str]] = {}
            for n in conv_t:
                if n not in panel:
                    rows.setdefault(graph.weights[n].shape[1], []).append(n)
            for ic, members in rows.items():
                if len(members) > 1:
                    packed(f"packed_w{ic}", members, 3)
        for ic, members in _panel_bins(graph, sorted(panel)):
            packed(f"panels_w{ic}", members, 1)
        vectors = [n for n in names if n not in conv_t and shapes[n][2:] == (1, 1)]
        if len(vectors) > 1:             # norm weights, biases: one input, not a C12-sized surface each
            packed("packed_vectors", vectors, 1)
    for n in names:
        if n not in layout:
            layout[n] = (n, shapes[n], 0)
            ctx.io.inputs[n] = InputBinding(n, n, shapes[n], "fp16", kind="weight")
    return layout, axis, shapes


def run(graph: Graph, ctx: CompileContext) -> None:
    names = _selected(graph, ctx)
    if not names:
        graph.rewrite(lambda n: lower_conv_with_tensor_weight(n) if _needs_matmul(n) else None)
        return
    uses = graph.uses()
    conv_t: dict[str, list[Node]] = {}
    for name in names:
        convs = _conv_weight_uses(graph.weights[name], uses)
        if convs:
            conv_t[name] = convs
    width = _panel_width([graph.weights[n].shape[0] for n in conv_t])
    panel = {n for n in conv_t if ctx.options.panel_dynamic_weights and graph.weights[n].shape[0] % width == 0}
    pack = ctx.options.pack_dynamic_weights
    if pack and ctx.options.legacy and len(panel) < len(conv_t):
        ctx.warn("pack_dynamic_weights ignored on M1/M2 for [1, IC, 1, OC] weights: width-axis slices with begin != 0 "
                 "saturate there", "C35")

    layout, axis, shapes = _plan_surfaces(graph, ctx, names, conv_t, panel, width)
    for name in names:
        w = graph.weights[name]
        key, full, off = layout[name]
        kind = "conv_p" if name in panel else "conv_t" if name in conv_t else "as_is"
        ctx.io.dynamic[name] = DynamicWeight(name, tuple(w.node.attrs.get("user_shape", w.shape)), kind, key,
                                             shapes[name], off, initial=np.asarray(w.data),
                                             pack_axis=axis.get(name, 3))
    inputs: dict[str, Value] = {}
    weight_value: dict[str, Value] = {}

    def surface(name: str) -> Value:
        """The weight's value in its surface layout (creating the input / slice at first use)."""
        if name in weight_value:
            return weight_value[name]
        key, full, off = layout[name]
        if key not in inputs:
            inputs[key] = graph.add_node("input", {}, {"io_name": key}, [(full, "fp16")], name=key).out
            graph.inputs[key] = inputs[key]
        v = inputs[key]
        dw = ctx.io.dynamic[name]
        if full != dw.surface_shape:
            begin = [0, 0, 0, 0]
            begin[dw.pack_axis] = off
            v = ops.slice_by_size(v, tuple(begin), dw.surface_shape, name=f"{name}_slice")
        weight_value[name] = v
        return v

    conv_owner = {id(n): name for name, convs in conv_t.items() for n in convs}
    by_value = {id(graph.weights[n]): n for n in names}

    def visit(node: Node):
        if id(node) in conv_owner:
            name = conv_owner[id(node)]
            ctx.count("dynamic_weights", "conv_to_matmul")
            idiom = _panel_idiom if name in panel else _matmul_idiom
            return idiom(node.inputs["x"], surface(name), graph.weights[name].shape[0], node.name)
        if node.op == "const" and id(node.out) in by_value:
            name = by_value[id(node.out)]
            if name in conv_t:
                return None                      # only the rewritten convs used it; DCE removes it
            v = surface(name)
            ctx.count("dynamic_weights", "as_input")
            return v if v.shape == node.out.shape else ops.reshape(v, node.out.shape, name=f"{name}_view")
        if _needs_matmul(node):
            ctx.count("dynamic_weights", "tensor_weight_conv")
            return lower_conv_with_tensor_weight(node)
        return None

    graph.rewrite(visit)
