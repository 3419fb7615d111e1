"""Deterministic MIL text for the ios18 dialect (default) and the verbose ios16 dialect (M1/M2).

Same graph → byte-identical text: statements in graph order, every non-tensor operand as a named const
right before its op (C15), keyword arguments in alphabetical order, floats rounded to the const's dtype
and printed as the shortest ``%g`` decimal that rounds back to the same value (the canonical form of
``orion.mil.format``, so ``format(text) == text``).
"""

from __future__ import annotations

import numpy as np

from ...errors import CompileError
from ...ir.graph import Graph
from ...ir.ops import OPS
from ..passes.budget import is_blob_const
from ..passes.context import CompileContext, compile_error
from .constexpr import blob_items
from .constexpr import statement as constexpr_statement
from .weights import WeightFiles

BUILD_INFO = {
    "ios18": ('program(1.3)', 'dict<string, string>',
              (("coremlc-component-MIL", "3510.2.1"), ("coremlc-version", "3505.4.1"),
               ("coremltools-component-milinternal", ""), ("coremltools-version", "9.0"))),
    "ios16": ('program(1.0)', 'dict<tensor<string, []>, tensor<string, []>>', (("coremlc-version", "3505.4.1"),)),
}
_ROUND = {"fp16": np.float16, "fp32": np.float32}


def format_float(value: float, dtype: str = "fp16") -> str:
    """Shortest %g decimal that rounds back to the same fp16/fp32 value (``0.125``, ``1e-05``, ``-0.5``)."""
    cast = _ROUND[dtype]
    with np.errstate(over="ignore"):
        return _format(float(cast(value)), value, cast, dtype)


def _format(r: float, value, cast, dtype) -> str:
    if not np.isfinite(r):
        raise CompileError(f"constant {value!r} is not finite in {dtype}; MIL literals must be finite")
    if r == 0:
        return "-0.0" if np.signbit(r) else "0.0"
    for p in range(1, 18):
        s = "%.*g" % (p, r)
        if float(cast(float(s))) == r:
            break
    if "." not in s and "e" not in s:
        s += ".0"
    return s


def quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Dialect:
    def __init__(self, target: str):
        self.target = target
        self.legacy = target == "ios16"

    def scalar_type(self, dtype: str) -> str:
        return f"tensor<{dtype}, []>" if self.legacy else dtype

    @staticmethod
    def tensor_type(dtype: str, shape) -> str:
        return f"tensor<{dtype}, [{', '.join(str(int(d)) for d in shape)}]>"

    def type_of(self, dtype: str, shape) -> str:
        return self.scalar_type(dtype) if len(shape) == 0 else self.tensor_type(dtype, shape)

    def scalar(self, dtype: str, text: str) -> str:
        return f"{self.scalar_type(dtype)}({text})"

    def string(self, s: str) -> str:
        return self.scalar("string", quote(s))

    def value_text(self, dtype: str, v) -> str:
        if dtype in ("fp16", "fp32"):
            return format_float(float(v), dtype)
        if dtype == "bool":
            return "true" if v else "false"
        if dtype == "string":
            return quote(str(v))
        return str(int(v))

    def literal(self, dtype: str, shape, values) -> str:
        if len(shape) == 0:
            return self.scalar(dtype, self.value_text(dtype, values))
        items = ", ".join(self.value_text(dtype, x) for x in np.asarray(values).ravel())
        return f"{self.tensor_type(dtype, shape)}([{items}])"

    def blobfile(self, dtype: str, shape, path: str, offset: int) -> str:
        return (f"{self.tensor_type(dtype, shape)}(BLOBFILE(path = {self.string(path)}, "
                f"offset = {self.scalar('uint64', str(int(offset)))}))")

    def const_stmt(self, type_text: str, name: str, val: str) -> str:
        return f"        {type_text} {name} = const()[name = {self.string(name)}, val = {val}];\n"


_ATTR_DTYPE = {"int32": "int32", "int32[]": "int32", "bool": "bool", "fp16": "fp16", "string": "string"}


def _attr_literal(d: Dialect, kind: str, value) -> tuple[str, str]:
    """(type text, literal text) of a helper const."""
    dtype = _ATTR_DTYPE[kind]
    if kind == "int32[]":
        vals = [int(x) for x in value]
        return d.tensor_type("int32", [len(vals)]), d.literal("int32", [len(vals)], vals)
    return d.scalar_type(dtype), d.literal(dtype, [], value)


def _attr_list(d: Dialect, node, v, weights: WeightFiles) -> str:
    """``axis = int32(0), name = string("w"), quantized_data = tensor<int8, [..]>(BLOBFILE(..)), ...`` (sorted):
    tensor operands as BLOBFILE tensors of the weight file, scalars inline."""
    items = [("name", d.string(v.mil_name))]
    for k, val in node.attrs.items():
        if val is None:
            continue
        ref = weights.refs.get((id(v), k))
        if ref is not None:
            dtype = val.dtype if hasattr(val, "blob_dtype_code") else _literal_dtype(np.asarray(val))
            items.append((k, d.blobfile(dtype, np.shape(val) if not hasattr(val, "shape") else val.shape, *ref)))
            continue
        arr = np.asarray(val)
        items.append((k, d.literal(_literal_dtype(arr), arr.shape, arr)))
    return ", ".join(f"{k} = {t}" for k, t in sorted(items))


def _literal_dtype(arr: np.ndarray) -> str:
    return "int32" if arr.dtype.kind in "iu" and arr.dtype.itemsize > 1 else \
        {"i": "int8", "u": "uint8", "f": "fp16", "b": "bool"}[arr.dtype.kind]


def emit(graph: Graph, ctx: CompileContext, weights: WeightFiles) -> str:
    d = Dialect(ctx.options.target)
    header, bi_type, pairs = BUILD_INFO[ctx.options.target]
    out = [header, "\n[buildInfo = ", bi_type, "({",
           ", ".join("{" + quote(k) + ", " + quote(v) + "}" for k, v in pairs), "})]\n{\n"]
    params = ", ".join(f"{d.tensor_type(v.dtype, v.shape)} {v.mil_name}" for v in graph.inputs.values()
                       if v.node in graph.nodes)
    out.append(f"    func main<{ctx.options.target}>({params}) {{\n")
    attr_names = getattr(ctx, "attr_names", {})
    for node in graph.nodes:
        v = node.out
        if node.op == "input":
            continue
        if node.op == "const":
            q = node.attrs.get("quant")
            if q is not None:                                   # a compressed weight: its constexpr op
                refs = [weights.refs[(id(v), param)] for param, *_ in blob_items(q)]
                out.append(constexpr_statement(d, v.mil_name, q, refs, v.shape))
                continue
            if is_blob_const(v):
                path, off = weights.refs[id(v)]
                val = d.blobfile(v.dtype, v.shape, path, off)
            else:
                val = d.literal(v.dtype, v.shape, np.asarray(v.data))
            out.append(d.const_stmt(d.type_of(v.dtype, v.shape), v.mil_name, val))
            continue
        spec = OPS[node.op]
        if spec.attrs and spec.attrs[0].kind == "attr":       # constexpr: parameters in the attribute list
            out.append(f"        {d.type_of(v.dtype, v.shape)} {v.mil_name} = {spec.mil}()"
                       f"[{_attr_list(d, node, v, weights)}];\n")
            continue
        args: list[tuple[str, str]] = []
        for k, x in node.inputs.items():
            ref = "(" + ", ".join(e.mil_name for e in x) + ")" if isinstance(x, tuple) else x.mil_name
            args.append((k, ref))
        for ad in spec.attrs:
            if not ad.mil or node.attrs[ad.name] is None:     # None: an optional parameter left out
                continue
            cname = attr_names.get((node.id, ad.name))
            if cname is None:
                raise compile_error(f"internal: no name for parameter {ad.name!r} of {node.describe()}; run the "
                                    f"names pass")
            type_text, lit = _attr_literal(d, ad.kind, node.attrs[ad.name])
            out.append(d.const_stmt(type_text, cname, lit))
            args.append((ad.name, cname))
        args.sort()
        arg_text = ", ".join(f"{k} = {r}" for k, r in args)
        out.append(f"        {d.type_of(v.dtype, v.shape)} {v.mil_name} = {spec.mil}({arg_text})"
                   f"[name = {d.string(v.mil_name)}];\n")
    out.append("    } -> (" + ", ".join(v.mil_name for v in graph.outputs.values()) + ");\n}\n")
    return "".join(out)
