"""I/O legalization: make every program input and output something the ANE evaluates correctly.

1. Outputs are distinct op results (C17: never a parameter or a const; a value returned twice gets an
   ``identity`` per extra name).
2. ios16 (M1/M2): fp32 I/O becomes fp16 I/O with the conversion on the host (C28).
3. Sequence padding (decode, C04 "seq >= 16"): inputs whose last axis S is below ``min_seq`` are
   re-traced at a padded S' when the graph is column-independent along that axis (elementwise ops,
   1x1 convs, reductions/softmax over other axes, attention whose *queries* carry S, ...). Constants
   that carry S are zero-padded; outputs that carry S are sliced back on the host.
4. Surface size (C04: >= 49,152 bytes): a remaining small input is passed zero-padded on its last axis
   and cut back in the program with ``slice_by_size`` (begin 0, so C34/C35 do not apply); a remaining
   small output is widened by a broadcast ``mul`` with ones on a new last axis and every k-th element
   is read back on the host.
Uniform allocation (C02/C12) is the runtime's: it allocates all surfaces of a direction at one size.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir import ops
from ...ir.graph import Graph, Node, Value
from ...ir.ops import SCHEMA, reinfer
from .context import CompileContext, compile_error


class _Unsafe(Exception):
    pass


# Column-independent ops, read from the schema's output rules: per-element with broadcasting, and
# per-element on x alone (cast and identity included).
_BROADCASTING = frozenset(n for n, r in SCHEMA.items() if r["output"].startswith("broadcast("))
_PER_ELEMENT = frozenset(n for n, r in SCHEMA.items() if r["output"].startswith("elementwise(x)"))


def _round16(n: int) -> int:
    return -(-n // 16) * 16


# --------------------------------------------------------------------------------------- outputs
def _outputs_are_ops(graph: Graph, ctx: CompileContext) -> None:
    seen: set[int] = set()
    for key, v in list(graph.outputs.items()):
        if v.op in ("input", "const") or id(v) in seen:
            graph.outputs[key] = ops.identity(v, name=key)
            ctx.count("io_legalize", "identity_outputs")
        seen.add(id(graph.outputs[key]))


def _host_fp32(graph: Graph, ctx: CompileContext) -> None:
    """C28: on M1/M2 the program's I/O is fp16; fp32 conversions move to the host."""
    changed = False
    for key, v in graph.inputs.items():
        if v.dtype == "fp32":
            v.dtype = "fp16"
            changed = True
            ctx.count("io_legalize", "host_cast_inputs")
    for key, v in list(graph.outputs.items()):
        if v.dtype == "fp32" and v.op == "cast" and v.node.inputs["x"].dtype == "fp16":
            src = v.node.inputs["x"]
            graph.outputs[key] = src if src.op not in ("input", "const") else ops.identity(src, name=key)
            ctx.count("io_legalize", "host_cast_outputs")
    if changed:
        reinfer(graph)
    _outputs_are_ops(graph, ctx)


# ------------------------------------------------------------------------ sequence padding retrace
def _plan_retrace(graph: Graph, keys: list[str], s: int):
    """Which values carry the padded axis, and the node edits that padding needs; raises _Unsafe."""
    axis_of: dict[int, int] = {id(graph.inputs[k]): graph.inputs[k].rank - 1 for k in keys}
    const_pads: list[tuple[Node, str, Value, int]] = []      # (node, param, const, axis)
    attr_edits: list[tuple[Node, str, int]] = []              # (node, kind, axis)

    def elementwise(node):
        out = node.out
        r = out.rank
        found = None
        for k, v in node.inputs.items():
            if id(v) in axis_of:
                a = axis_of[id(v)] + (r - v.rank)
                if found is not None and found != a:
                    raise _Unsafe
                found = a
        for k, v in node.inputs.items():
            if id(v) in axis_of:
                continue
            j = found - (r - v.rank)
            if j < 0 or v.shape[j] == 1:
                continue
            if v.is_const and v.shape[j] == s:
                const_pads.append((node, k, v, j))
                continue
            raise _Unsafe
        return found

    for node in graph.nodes:
        tracked = [v for v in node.input_values() if id(v) in axis_of]
        if not tracked or node.op in ("input", "const"):
            continue
        op, at = node.op, node.attrs
        x = node.inputs.get("x")
        a = axis_of.get(id(x)) if x is not None else None
        if op in _BROADCASTING:
            out_axis = elementwise(node)
        elif op in _PER_ELEMENT:
            out_axis = a
        elif op == "softmax":
            if at["axis"] == a:
                raise _Unsafe
            out_axis = a
        elif op.startswith("reduce_"):
            if a in at["axes"]:
                raise _Unsafe
            out_axis = a if at["keep_dims"] else a - sum(1 for ax in at["axes"] if ax < a)
        elif op == "transpose":
            out_axis = list(at["perm"]).index(a)
        elif op == "reshape":
            pre, post = int(np.prod(x.shape[:a])), int(np.prod(x.shape[a + 1:]))
            shape = list(at["shape"])
            out_axis = None
            for j in reversed(range(len(shape))):    # with S = 1 several axes fit: prefer the last (S-last layout)
                if shape[j] == s and int(np.prod(shape[:j])) == pre and int(np.prod(shape[j + 1:])) == post:
                    out_axis = j
                    break
            if out_axis is None:
                raise _Unsafe
            attr_edits.append((node, "reshape", out_axis))
        elif op in ("slice_by_size", "slice_by_index"):
            if at["begin"][a] != 0 or node.out.shape[a] != s or at.get("stride", [1] * 8)[a] != 1:
                raise _Unsafe
            out_axis = a
            attr_edits.append((node, op, a))
        elif op == "conv":
            w = node.inputs["weight"]
            if id(w) in axis_of or a not in (2, 3) or w.shape[a] != 1 or at["strides"][a - 2] != 1 or (
                    at["pad_type"] == "custom" and any(at["pad"][2 * (a - 2): 2 * (a - 2) + 2])):
                raise _Unsafe
            out_axis = a
        elif op == "matmul":
            xv, yv = node.inputs["x"], node.inputs["y"]
            r = node.out.rank
            ax, ay = axis_of.get(id(xv)), axis_of.get(id(yv))
            out_axis = None
            for v, av, is_x in ((xv, ax, True), (yv, ay, False)):
                if av is None:
                    continue
                rel = av - v.rank
                tr = at["transpose_x"] if is_x else at["transpose_y"]
                free = (-2 if not tr else -1) if is_x else (-1 if not tr else -2)
                if rel >= -2:
                    if rel != free:
                        raise _Unsafe           # the padded axis would be contracted
                    cand = r + (-2 if is_x else -1)
                else:
                    cand = r + rel
                    other = yv if is_x else xv
                    j = other.rank + rel
                    if (j >= 0 and other.shape[j] != 1 and id(other) not in axis_of):
                        raise _Unsafe
                if out_axis is not None and out_axis != cand:
                    raise _Unsafe
                out_axis = cand
        elif op == "concat":
            if any(id(v) not in axis_of or axis_of[id(v)] != a for v in node.inputs["values"]) or at["axis"] == a:
                raise _Unsafe
            out_axis = a
        else:
            raise _Unsafe
        axis_of[id(node.out)] = out_axis
    return axis_of, const_pads, attr_edits


def _apply_retrace(graph: Graph, keys, s, s_pad, axis_of, const_pads, attr_edits) -> None:
    for k in keys:
        v = graph.inputs[k]
        v.shape = v.shape[:-1] + (s_pad,)
    for node, kind, ax in attr_edits:
        if kind == "reshape":
            shape = list(node.attrs["shape"])
            shape[ax] = s_pad
            node.attrs["shape"] = tuple(shape)
        elif kind == "slice_by_size":
            size = list(node.attrs["size"])
            size[ax] = s_pad
            node.attrs["size"] = tuple(size)
        else:
            end = list(node.attrs["end"])
            end[ax] = s_pad
            node.attrs["end"] = tuple(end)
    for node, param, c, j in const_pads:
        data = np.asarray(c.data)
        widths = [(0, 0)] * data.ndim
        widths[j] = (0, s_pad - s)
        with graph.building_before(node):
            node.inputs[param] = graph.const(np.pad(data, widths).astype(np.float32), c.dtype)
    reinfer(graph)


def _sequence_padding(graph: Graph, ctx: CompileContext) -> dict[int, int]:
    opts = ctx.options
    acts = [b for b in ctx.io.inputs.values() if b.kind == "activation"]
    short = [graph.inputs[b.key].shape[-1] for b in acts if graph.inputs[b.key].shape[-1] < opts.min_seq]
    if not short:
        return {}
    s = min(short)
    keys = [b.key for b in acts if graph.inputs[b.key].shape[-1] == s]
    try:
        axis_of, const_pads, attr_edits = _plan_retrace(graph, keys, s)
    except _Unsafe:
        ctx.count("io_legalize", "retrace_unsafe")
        return {}
    s_pad = _round16(max(opts.min_seq, s))
    for k in keys:
        v = graph.inputs[k]
        col = v.nbytes // v.shape[-1]
        s_pad = max(s_pad, _round16(math.ceil(opts.min_surface_bytes / col)))
    s_pad = min(s_pad, max(opts.max_seq_pad, _round16(opts.min_seq)))
    if s_pad <= s:
        return {}
    out_axes = {id(v): axis_of[id(v)] for v in graph.outputs.values() if id(v) in axis_of}
    _apply_retrace(graph, keys, s, s_pad, axis_of, const_pads, attr_edits)
    ctx.count("io_legalize", "retraced_inputs", len(keys))
    for b in ctx.io.inputs.values():
        if b.key in keys:
            b.pad_axis = graph.inputs[b.key].rank - 1
    result = {}
    for key, v in graph.outputs.items():
        if id(v) in out_axes:
            part = ctx.io.part_for_key(key)
            part.unpad = part.unpad + (("slice", out_axes[id(v)], s),)
            result[id(v)] = s_pad
    return result


# ------------------------------------------------------------------------- boundary pad / widen
def _pad_small_inputs(graph: Graph, ctx: CompileContext) -> None:
    opts = ctx.options
    targets = {}
    for b in ctx.io.inputs.values():
        v = graph.inputs[b.key]
        n = v.shape[-1]
        col = v.nbytes // n
        if v.nbytes >= opts.min_surface_bytes and n >= opts.min_seq:
            continue
        n_pad = max(opts.min_seq, n, _round16(math.ceil(opts.min_surface_bytes / col)))
        if n_pad > opts.max_axis:
            ctx.warn(f"input {b.name!r} {list(v.shape)} cannot reach {opts.min_surface_bytes} bytes by padding "
                     f"its last axis", "C04")
            continue
        targets[id(v.node)] = (b, n_pad)
    if not targets:
        return

    def visit(node: Node):
        if id(node) not in targets:
            return None
        b, n_pad = targets[id(node)]
        v = node.out
        orig = v.shape
        v.shape = orig[:-1] + (n_pad,)
        graph.nodes.append(node)
        cut = ops.slice_by_size(v, (0,) * len(orig), orig, name=f"{b.key}_unpad")
        b.pad_axis = len(orig) - 1
        ctx.count("io_legalize", "padded_inputs")
        return cut

    graph.rewrite(visit)


def _widen_small_outputs(graph: Graph, ctx: CompileContext) -> None:
    opts = ctx.options
    ones_by_shape: dict = {}
    for key, v in list(graph.outputs.items()):
        if v.nbytes >= opts.min_surface_bytes and v.shape[-1] >= opts.min_seq:
            continue
        part = ctx.io.part_for_key(key)
        if v.rank >= 5:
            ctx.warn(f"output {key!r} {list(v.shape)} is below {opts.min_surface_bytes} bytes and cannot be widened",
                     "C04")
            continue
        n = v.shape[-1]
        k = max(math.ceil(opts.min_surface_bytes / v.nbytes), math.ceil(opts.min_seq / n))
        if n * k > opts.max_axis:
            ctx.warn(f"output {key!r} {list(v.shape)} cannot be widened to {opts.min_surface_bytes} bytes", "C04")
            continue
        src = v.node.inputs["x"] if v.op == "cast" and v.node.inputs["x"].dtype == "fp16" else v
        col = ops.reshape(src, v.shape + (1,))
        okey = (v.rank, k, col.dtype)
        if okey not in ones_by_shape:     # one const per shape: each costs a weight slot (C18)
            ones_by_shape[okey] = ops.as_value(np.ones((1,) * v.rank + (k,), np.float32), col)
        ones = ones_by_shape[okey]
        wide = ops.reshape(ops.mul(col, ones), v.shape[:-1] + (n * k,), name=None if src is not v else key)
        if src is not v:
            wide = ops.cast(wide, v.dtype, name=key)
        graph.outputs[key] = wide
        part.unpad = part.unpad + (("widen", k),)
        ctx.count("io_legalize", "widened_outputs")


def _finish_bindings(graph: Graph, ctx: CompileContext) -> None:
    for b in ctx.io.inputs.values():
        v = graph.inputs[b.key]
        b.mil_shape, b.mil_dtype = v.shape, v.dtype
    for ob in ctx.io.outputs.values():
        for p in ob.parts:
            v = graph.outputs[p.key]
            p.mil_shape, p.mil_dtype = v.shape, v.dtype


def run(graph: Graph, ctx: CompileContext) -> None:
    _outputs_are_ops(graph, ctx)
    if ctx.options.legacy:
        _host_fp32(graph, ctx)
    for b in ctx.io.inputs.values():
        if graph.inputs[b.key].dtype == "bool":
            raise compile_error(f"input {b.name!r}: bool tensors cannot be program inputs", "C39", b.name)
    _sequence_padding(graph, ctx)
    _pad_small_inputs(graph, ctx)
    _widen_small_outputs(graph, ctx)
    _outputs_are_ops(graph, ctx)
    _finish_bindings(graph, ctx)
