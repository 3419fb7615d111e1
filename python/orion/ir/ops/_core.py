"""The IR view of the op schema: ``OpDef`` per op, built from the native schema row (MIL parameters,
types, optionality, family, ANE facts) plus what only Python knows — the float64 numpy reference and the
builder defaults — and ``make``, which every builder calls.

The schema itself lives once, in the simulator's registry (``src/orion_native/sim/ops/registry.cpp``);
``define`` refuses an IR op whose parameters disagree with it. Every op's shape/dtype rule lives there too:
``native_infer`` asks the registry's inference (``_native.sim_infer``), the one the simulator runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ... import _native
from ...errors import CompileError
from ..graph import BUILDERS, NP_DTYPES, GraphError, MAX_RANK, Value

REQUIRED = object()
MAX_AXIS = 65536  # C22

# schema type of a const parameter -> the IR attribute kind (the codegen's named-const dtype, C15)
_KINDS = {"const int32": "int32", "const int32[]": "int32[]", "const bool": "bool", "const fp": "fp16",
          "const string": "string"}
# schema tensor type -> IR dtypes an operand may have ("tensor" alone: any)
_TENSOR_DTYPES = {"tensor<bool>": ("bool",), "tensor<int>": ("int32", "int8", "uint8"),
                  "tensor<int8|uint8>": ("int8", "uint8"), "tensor<fp>": ("fp16", "fp32")}


def _load_schema() -> dict[str, dict]:
    return {o["name"]: o for o in _native.sim_ops("m4", "strict")}


SCHEMA: dict[str, dict] = _load_schema()
# ops whose result is a compile-time constant (parameters in the attribute list: const, constexpr_*)
BAKED = frozenset(n for n, r in SCHEMA.items() if r["attr_params"])


@dataclass(frozen=True)
class AttrDef:
    """A non-tensor parameter. ``kind``: int32, int32[], bool, fp16, string (or "attr" for the attribute
    list of constexpr ops). ``default=None``: optional, omitted from the MIL text when absent.
    ``mil=False``: not emitted as a named const (constexpr attributes)."""
    name: str
    kind: str
    default: Any = REQUIRED
    mil: bool = True


@dataclass(frozen=True)
class OpDef:
    name: str                         # IR op name = MIL op name
    mil: str | None                   # MIL spelling (None: never emitted)
    inputs: tuple[str, ...]           # tensor params in MIL keyword names; "bias?" optional, "*values" tuple
    attrs: tuple[AttrDef, ...]
    eval: Callable[[dict, dict], list] | None
    ane: str                          # ANE notes, constraint IDs (schema facts + IR notes)
    lowered_by: str | None = None     # pass that removes it before codegen (the schema names a lowering)
    category: str = "tensor"          # the schema family ("source" for const / input)
    input_dtypes: tuple = ()          # (param, allowed dtypes, must be const) from the schema types

    def attr(self, name: str) -> AttrDef:
        for a in self.attrs:
            if a.name == name:
                return a
        raise KeyError(name)


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    OPS[op.name] = op
    return op


def _is_tensor(typ: str) -> bool:
    return "tensor" in typ


def define(name: str, ev, note: str = "", attrs: dict | None = None, params: tuple[str, ...] | None = None,
           ) -> OpDef:
    """Register the IR op ``name`` from its schema row. ``attrs``: the const parameters the IR carries,
    with their IR default (REQUIRED, a value, or None = omitted); ``params``: the tensor parameters the
    IR carries (default: all). Raises if either names a parameter the schema does not have or of the
    other kind, or if a required schema parameter is left out."""
    row = SCHEMA.get(name)
    if row is None:
        raise GraphError(f"op {name!r} is not in the simulator's op schema")
    types = row["types"]
    optional = {p.rstrip("?"): p.endswith("?") for p in row["params"]}
    attrs = dict(attrs or {})
    attr_list = row["attr_params"]
    tensor_params = [p for p in types if _is_tensor(types[p]) and not attr_list]
    chosen = tensor_params if params is None else list(params)
    for p in list(attrs) + chosen:
        if p not in types:
            raise GraphError(f"{name}: parameter {p!r} is not in the schema ({', '.join(row['params'])})")
    for p, opt in optional.items():
        if not opt and p not in attrs and p not in chosen:
            raise GraphError(f"{name}: the IR must carry the required schema parameter {p!r}")
    inputs, in_dtypes = [], []
    for p in chosen:
        if not _is_tensor(types[p]) or attr_list:
            raise GraphError(f"{name}: {p!r} ({types[p]}) is not a tensor parameter")
        t = types[p]
        inputs.append(("*" if t.startswith("tuple") else "") + p + ("?" if optional[p] else ""))
        dtypes, const = _TENSOR_DTYPES.get(t.replace("const ", "")), t.startswith("const")
        if dtypes is not None or const:           # only restricted operands cost a check in make()
            in_dtypes.append((p, dtypes, const))
    adefs = []
    for p, default in attrs.items():
        if attr_list:
            adefs.append(AttrDef(p, "attr", default, mil=False))
        elif types[p] not in _KINDS:
            raise GraphError(f"{name}: {p!r} has schema type {types[p]!r}, which is not an IR attribute")
        else:
            adefs.append(AttrDef(p, _KINDS[types[p]], default))
    facts = [f"ANE evidence {row['evidence']}"]
    if row["constraints"]:
        facts.append("constraints " + ", ".join(row["constraints"]))
    if row["lowering"]:
        facts.append("the compiler lowers it: " + row["lowering"])
    ane = "; ".join(facts) + (f". {note}" if note else "")
    return register(OpDef(name, name, tuple(inputs), tuple(adefs), ev, ane,
                          lowered_by="decompose" if row["lowering"] else None, category=row["family"],
                          input_dtypes=tuple(in_dtypes)))


def infer_types(op: str, inputs: dict, attrs: dict) -> list[tuple[tuple[int, ...], str]]:
    if op not in OPS:
        raise GraphError(f"unknown op {op!r}; registered ops: {', '.join(sorted(OPS))}")
    return native_infer(op, inputs, attrs)


# ------------------------------------------------------------------------------------------------
# shape inference: the simulator's registry
# ------------------------------------------------------------------------------------------------

_MIL_DTYPE = {np.dtype(v): k for k, v in NP_DTYPES.items()}


def _attr_operand(op: str, k: str, val) -> tuple:
    """A constexpr op's tensor attribute (numpy array or orion.quant.PackedInts) as a typed operand: its
    type is all the inference needs (the payload goes to the weight file)."""
    if hasattr(val, "blob_dtype_code"):                      # PackedInts: MIL dtype name and shape
        return (k, val.dtype, tuple(val.shape), True)
    dtype = _MIL_DTYPE.get(val.dtype)
    if dtype is None:
        raise GraphError(f"{op}: {k} has dtype {val.dtype}, which is not a MIL tensor dtype "
                         f"({', '.join(NP_DTYPES)})")
    return (k, dtype, val.shape, True)


def native_infer(op: str, inputs: dict, attrs: dict) -> list[tuple[tuple[int, ...], str]]:
    """The output type of an ``op`` node from its operands' types and its attributes, as the simulator
    infers it (one rule per op, in ``src/orion_native/sim/ops/``). A refusal is a GraphError naming the op,
    the problem and the operand types."""
    operands = []
    for p, v in inputs.items():
        if type(v) is tuple:
            operands.extend((p, x.dtype, x.shape, x.node.op == "const") for x in v)
        else:
            operands.append((p, v.dtype, v.shape, v.node.op == "const"))
    consts = attrs
    if op in BAKED:                                          # constexpr: tensors sit in the attributes
        consts = {}
        for k, val in attrs.items():
            if isinstance(val, np.ndarray) or hasattr(val, "blob_dtype_code"):
                operands.append(_attr_operand(op, k, val))
            else:
                consts[k] = val
    try:
        dtype, shape = _native.sim_infer(op, operands, consts)
    except CompileError as e:
        detail = str(e).removeprefix("InvalidMILProgram: ")
        types = ", ".join(f"{p}: {d}{list(s)}" for p, d, s, _ in operands)
        raise GraphError(f"{detail}" + (f" (operands {types})" if types else "")) from None
    return [(shape, dtype)]


# ------------------------------------------------------------------------------------------------
# helpers shared by the builders (IR attributes are normalised: axes non-negative)
# ------------------------------------------------------------------------------------------------

def _axis(op: str, axis: int, rank: int, shape) -> int:
    if not -rank <= axis < rank:
        raise GraphError(f"{op}: axis {axis} out of range for a rank-{rank} tensor {list(shape)}")
    return axis % rank


def _norm_axes(op, x, axes):
    axes = [axes] if isinstance(axes, int) else list(axes)
    return tuple(_axis(op, int(a), x.rank, x.shape) for a in axes)


def _errstate(fn):
    def ev(i, a):
        with np.errstate(all="ignore"):
            return fn(i, a)
    return ev


# ------------------------------------------------------------------------------------------------
# building nodes
# ------------------------------------------------------------------------------------------------

def builder(fn):
    """Registers ``fn`` as the builder of the op it is named after (graph.BUILDERS: Value's operators and
    ``g.<op>(...)`` find it there)."""
    BUILDERS[fn.__name__] = fn
    return fn


def _graph_of(*vals):
    for v in vals:
        if isinstance(v, Value):
            return v.node.graph
        if isinstance(v, (tuple, list)):
            for x in v:
                if isinstance(x, Value):
                    return x.node.graph
    raise GraphError("an op needs at least one graph Value operand (got only Python numbers or arrays)")


def as_value(x, like: Value, what: str = "operand") -> Value:
    """Python numbers and numpy arrays become consts of ``like``'s dtype in ``like``'s graph."""
    g = like.node.graph
    if isinstance(x, Value):
        g._check_member(x, what)
        return x
    if isinstance(x, (int, float, np.integer, np.floating)) or (isinstance(x, np.ndarray) and x.ndim == 0):
        return g.const(float(x), dtype=like.dtype if like.dtype in ("fp16", "fp32") else "fp16")
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "fiu":
            raise GraphError(f"{what}: cannot use an array of dtype {x.dtype} as a tensor operand")
        return g.const(x, dtype=like.dtype)
    raise GraphError(f"{what}: expected a Value, a number or a numpy array, got {type(x).__name__}")


def _check_operand_types(d: OpDef, inputs: dict) -> None:
    for p, dtypes, const in d.input_dtypes:
        v = inputs.get(p)
        if v is None:
            continue
        for x in (v if isinstance(v, tuple) else (v,)):
            if dtypes is not None and x.dtype not in dtypes:
                raise GraphError(f"{d.name}: {p} must be {' or '.join(dtypes)}, got {x!r}")
            if const and not x.is_const:
                raise GraphError(f"{d.name}: {p} must be a constant (the schema says const), got {x!r}")


def make(op: str, inputs: dict, attrs: dict | None = None, name: str | None = None, graph=None) -> Value:
    """Build one node of ``op`` (attrs get registry defaults) and return its first output. ``graph`` is
    needed only by ops without tensor operands (constexpr)."""
    d = OPS[op]
    attrs = dict(attrs or {})
    for ad in d.attrs:
        if ad.name not in attrs:
            if ad.default is REQUIRED:
                raise GraphError(f"{op}: missing required parameter {ad.name!r}")
            attrs[ad.name] = ad.default
    unknown = set(attrs) - {ad.name for ad in d.attrs}
    if unknown:
        raise GraphError(f"{op}: unknown parameter(s) {sorted(unknown)}")
    g = graph if graph is not None else _graph_of(*inputs.values())
    for k, v in inputs.items():
        for x in (v if isinstance(v, tuple) else (v,)):
            g._check_member(x, f"{op}({k}=...)")
    if d.input_dtypes:
        _check_operand_types(d, inputs)
    try:
        types = native_infer(op, inputs, attrs)
    except GraphError as e:
        raise GraphError(f"{e}" + (f" [building {name!r}]" if name else "")) from None
    for shape, _ in types:
        if len(shape) > MAX_RANK:
            raise GraphError(f"{op}: result rank {len(shape)} {list(shape)} exceeds 5 [C23]")
    return g.add_node(op, inputs, attrs, types, name=name).out


def reinfer(graph) -> None:
    """Recompute every node's output shapes/dtypes from its inputs and attrs (after a pass edits them)."""
    for n in graph.nodes:
        if n.op in ("input", "const"):
            continue
        types = infer_types(n.op, n.inputs, n.attrs)
        for v, (shape, dtype) in zip(n.outputs, types):
            v.shape, v.dtype = tuple(shape), dtype


def evaluate_node(op: str, inputs: dict, attrs: dict) -> list[np.ndarray]:
    """Run the float64 reference of one op on numpy inputs."""
    d = OPS[op]
    if d.eval is None:
        raise GraphError(f"{op} has no reference implementation")
    return [np.asarray(r, dtype=np.float64) for r in d.eval(inputs, attrs)]


# sources: a const is a schema op (its value is the IR attribute "value"); an input is IR-only
register(OpDef("const", "const", (), (), None,
               "scalars and int vectors inline; float tensors as BLOBFILE weights (offset = metadata record, C08)",
               category="source"))
register(OpDef("input", None, (), (), None,
               "a function parameter; bound to surfaces in alphabetical order of MIL names (C13)", category="source"))
