"""Graph IR: typed SSA values produced by nodes, kept in build (= topological) order.

A ``Graph`` is what users build and what every compiler pass rewrites. Each ``Node`` is one op of the
registry (``ops/``, derived from the op schema); its tensor operands are ``Value``s, its non-tensor
operands plain Python ``attrs`` (the codegen turns those into named MIL consts, C15). Shapes and dtypes are inferred when a
node is built, so a bad graph fails at the line that builds it, with the op and the shapes in the
message.

Inputs, constants and weights are nodes too (ops ``input`` and ``const``), which keeps passes uniform.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from ..errors import OrionError, QuantizationError
from ..quant import QuantizedArray, QuantizedTensor, quantize_tensor
from .display import graph_html

DTYPES = ("fp16", "fp32", "int32", "bool", "int8", "uint8")  # int8/uint8: quantized intermediates only
NP_DTYPES = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "bool": np.bool_, "int8": np.int8,
             "uint8": np.uint8}
ITEMSIZE = {"fp16": 2, "fp32": 4, "int32": 4, "bool": 1, "int8": 1, "uint8": 1}
MAX_RANK = 5  # C23
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# The op builders by name, filled in as orion.ir.ops loads (ops/ registers every builder, the composites
# included; orion.ir imports ops right after this module). Value's operators, g.<op>(...) and the fp32 I/O
# casts call them through this table: the builders import Value from here, so this module imports none of them.
BUILDERS: dict[str, Callable[..., Value]] = {}


def expand_quantized(q, shape, what: str):
    """``q`` viewed as ``shape``: its own shape with unit dims appended (``[out, in]`` -> ``[out, in, 1, 1]``),
    the one reshape a compressed weight's operands follow; anything else raises GraphError."""
    shape = tuple(int(s) for s in shape)
    r = len(q.shape)
    if shape[:r] != tuple(q.shape) or any(s != 1 for s in shape[r:]):
        raise GraphError(f"{what}: a compressed weight of shape {list(q.shape)} can only gain trailing unit dims, "
                         f"not become {list(shape)}")
    return q if len(shape) == r else q.expand_rank(len(shape))


class GraphError(OrionError, ValueError):
    """A graph is malformed: bad shapes or dtypes for an op, duplicate or unknown names, cycles."""


def dtype_of(x: Any) -> str:
    """The IR dtype name of a numpy dtype / array ("fp16", "fp32", "int32", "bool")."""
    dt = np.dtype(getattr(x, "dtype", x))
    if dt == np.bool_:
        return "bool"
    if dt.kind in "iu":
        return "int32"
    if dt == np.float16:
        return "fp16"
    if dt.kind == "f":
        return "fp32"
    raise GraphError(f"unsupported dtype {dt}; orion graphs hold fp16, fp32, int32 or bool tensors")


def check_dtype(dtype: str, what: str) -> str:
    if dtype not in DTYPES:
        raise GraphError(f"{what}: unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return dtype


def check_shape(shape: Iterable[int], what: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(d) for d in shape)
    except TypeError:
        raise GraphError(f"{what}: shape must be a sequence of ints, got {shape!r}") from None
    if len(shape) > MAX_RANK:
        raise GraphError(f"{what}: rank {len(shape)} shape {list(shape)} exceeds the ANE limit of "
                         f"{MAX_RANK} [C23]; reshape to at most 5 axes")
    if any(d < 1 for d in shape):
        raise GraphError(f"{what}: shape {list(shape)} has an axis < 1 (the ANE rejects empty axes) [C22]")
    return shape


class Value:
    """One SSA value: the ``index``-th result of ``node``, with a static shape and dtype."""

    __slots__ = ("node", "index", "shape", "dtype", "name", "mil_name", "__weakref__")
    __array_ufunc__ = None  # numpy scalars/arrays defer to our operators (np.float32(2) * v works)

    def __init__(self, node: "Node", index: int, shape: tuple[int, ...], dtype: str, name: str | None = None):
        self.node = node
        self.index = index
        self.shape = tuple(shape)
        self.dtype = dtype
        self.name = name          # name hint (user-given or derived); final names: compiler/passes/names.py
        self.mil_name: str | None = None

    # --- introspection -------------------------------------------------------------------------
    @property
    def graph(self) -> "Graph":
        return self.node.graph

    @property
    def op(self) -> str:
        return self.node.op

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)  # shapes are small tuples of ints: math.prod beats np.prod

    @property
    def nbytes(self) -> int:
        return self.size * ITEMSIZE[self.dtype]

    @property
    def is_const(self) -> bool:
        """A compile-time constant (weights marked dynamic become inputs and stop being consts)."""
        return self.node.op == "const"

    @property
    def data(self) -> np.ndarray:
        if self.node.op != "const":
            raise GraphError(f"{self} is not a constant")
        return self.node.attrs["value"]

    def __repr__(self) -> str:
        label = self.name or f"{self.node.op}#{self.node.id}"
        return f"Value({label}: {self.dtype}{list(self.shape)})"

    __hash__ = object.__hash__

    # --- operator sugar (the op builders do the checking) ---------------------------------------
    def __add__(self, o): return BUILDERS["add"](self, o)
    def __radd__(self, o): return BUILDERS["add"](o, self)
    def __sub__(self, o): return BUILDERS["sub"](self, o)
    def __rsub__(self, o): return BUILDERS["sub"](o, self)
    def __mul__(self, o): return BUILDERS["mul"](self, o)
    def __rmul__(self, o): return BUILDERS["mul"](o, self)
    def __truediv__(self, o): return BUILDERS["div"](self, o)
    def __rtruediv__(self, o): return BUILDERS["div"](o, self)
    def __pow__(self, o): return BUILDERS["pow"](self, o)
    def __neg__(self): return BUILDERS["mul"](self, -1.0)
    def __matmul__(self, o): return BUILDERS["matmul"](self, o)

    def __eq__(self, other):  # keep identity semantics; elementwise compare is not an ANE op
        return self is other

    def reshape(self, *shape, name=None):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = shape[0]
        return BUILDERS["reshape"](self, shape, name=name)

    def transpose(self, *perm, name=None):
        if len(perm) == 1 and isinstance(perm[0], (tuple, list)):
            perm = perm[0]
        return BUILDERS["transpose"](self, perm, name=name)

    def cast(self, dtype, name=None):
        return BUILDERS["cast"](self, dtype, name=name)

    def sum(self, axes, keep_dims=True, name=None):
        return BUILDERS["reduce_sum"](self, axes, keep_dims=keep_dims, name=name)

    def mean(self, axes, keep_dims=True, name=None):
        return BUILDERS["reduce_mean"](self, axes, keep_dims=keep_dims, name=name)

    def max(self, axes, keep_dims=True, name=None):
        return BUILDERS["reduce_max"](self, axes, keep_dims=keep_dims, name=name)

    def __getitem__(self, index):
        return BUILDERS["getitem"](self, index)


class Node:
    """One op application. ``inputs`` maps MIL parameter names to Values (or tuples of Values)."""

    __slots__ = ("graph", "id", "op", "inputs", "attrs", "outputs", "name")

    def __init__(self, graph: "Graph", op: str, inputs: dict, attrs: dict, name: str | None):
        self.graph = graph
        self.id = next(graph._ids)
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.outputs: list[Value] = []
        self.name = name

    def input_values(self) -> Iterator[Value]:
        for v in self.inputs.values():
            if isinstance(v, tuple):
                yield from v
            else:
                yield v

    @property
    def out(self) -> Value:
        return self.outputs[0]

    def map_inputs(self, fn: Callable[[Value], Value]) -> None:
        for k, v in self.inputs.items():
            self.inputs[k] = tuple(fn(x) for x in v) if isinstance(v, tuple) else fn(v)

    def describe(self) -> str:
        """``conv(x: fp16[1, 768, 1, 64], weight: fp16[...]) -> fp16[...]`` for error messages."""
        args = []
        for k, v in self.inputs.items():
            vs = v if isinstance(v, tuple) else (v,)
            args.append(f"{k}=" + ",".join(f"{x.dtype}{list(x.shape)}" for x in vs))
        outs = ", ".join(f"{o.dtype}{list(o.shape)}" for o in self.outputs)
        label = f" '{self.name}'" if self.name else ""
        return f"{self.op}{label}({', '.join(args)}) -> {outs}"

    def __repr__(self) -> str:
        return f"Node({self.describe()})"


class Graph:
    """A dataflow graph of ANE ops with named inputs, weights and outputs.

    >>> g = Graph("ffn")
    >>> x = g.input("x", (1, 768, 1, 64))
    >>> g.output("y", ops.gelu(ops.linear(x, w, b)))
    """

    def __init__(self, name: str = "main"):
        self.name = name
        self.nodes: list[Node] = []
        self.inputs: dict[str, Value] = {}    # program parameters by name
        self.outputs: dict[str, Value] = {}   # program results by name (insertion order kept)
        self.weights: dict[str, Value] = {}   # named weight consts (dynamic-capable)
        self._ids = itertools.count()
        self._sink: list[Node] = self.nodes
        self._auto_names: dict[str, int] = {}

    # --- building -------------------------------------------------------------------------------
    def _check_new_name(self, name: str, kind: str) -> None:
        if not isinstance(name, str) or not _IDENT.match(name):
            raise GraphError(f"{kind} name {name!r} must be an identifier ([A-Za-z_][A-Za-z0-9_]*)")
        taken = {"input": self.inputs, "weight": self.weights, "output": self.outputs}
        for what, table in taken.items():
            if name in table:
                raise GraphError(f"duplicate name {name!r}: already used by {what} {table[name]!r}")

    def add_node(self, op: str, inputs: dict, attrs: dict, out_types: list[tuple[tuple[int, ...], str]],
                 name: str | None = None) -> Node:
        """Low level: append a node whose output types are already known (passes use ``ops`` instead)."""
        node = Node(self, op, inputs, attrs, name)
        for i, (shape, dtype) in enumerate(out_types):
            node.outputs.append(Value(node, i, shape, dtype, name if i == 0 else (f"{name}_{i}" if name else None)))
        self._sink.append(node)
        return node

    def input(self, name: str, shape: Iterable[int], dtype: str = "fp16") -> Value:
        """A program input. ``dtype`` is the I/O dtype; an fp32 input is cast to fp16 right away
        (the ANE computes in fp16; on M1/M2 the cast moves to the host, C28)."""
        self._check_new_name(name, "input")
        shape = check_shape(shape, f"input {name!r}")
        check_dtype(dtype, f"input {name!r}")
        if dtype not in ("fp16", "fp32"):
            raise GraphError(f"input {name!r}: dtype {dtype} cannot be a program input; use fp16 or fp32 [C39]")
        v = self.add_node("input", {}, {"io_name": name}, [(shape, dtype)], name=name).out
        self.inputs[name] = v
        if dtype == "fp32":
            return BUILDERS["cast"](v, "fp16", name=f"{name}_fp16")
        return v

    def weight(self, name: str, array, dynamic: bool = False, shape: Iterable[int] | None = None,
               quant=None) -> Value:
        """A named weight (kept in a blob file, or a program input when ``dynamic``).

        ``shape`` reshapes the array for the graph (e.g. ``[out, in]`` → ``[out, in, 1, 1]`` for a conv)
        while ``set_weights``/``dynamic`` keep accepting the array in its original shape.

        ``quant`` makes it a compressed weight: an :class:`orion.quant.QuantizedTensor` of ``array``
        (or ``array`` itself one, or an :class:`orion.quant.QuantizedArray`; ``quant`` left None), or a
        scheme name of :data:`orion.quant.SCHEMES` (``"int8"``, ``"lut4"``, ``"lut6"``, ``"int4"``...;
        default group / block sizes, replaced by the
        smallest divisor above them when they do not divide). It stays compressed through the passes
        (reshapes that append unit dims, as ``linear`` does, keep it) and the codegen emits its constexpr
        op with BLOBFILE operands; the graph computes with exactly that op's fp16 result. Baked only."""
        if quant is None and getattr(array, "quant", None) is not None:   # an orion.quant.QuantizedArray
            quant = array.quant
        if isinstance(array, QuantizedTensor):
            if quant is not None:
                raise GraphError(f"weight {name!r}: give the QuantizedTensor as array or as quant, not both")
            array, quant = None, array
        if quant is not None:
            return self._compressed_weight(name, array, quant, dynamic, shape, QuantizedTensor, quantize_tensor)
        self._check_new_name(name, "weight")
        arr = np.asarray(array)
        if arr.dtype.kind not in "f":
            raise GraphError(f"weight {name!r}: expected a floating-point array, got dtype {arr.dtype}")
        user_shape = tuple(arr.shape)
        if shape is not None:
            shape = check_shape(shape, f"weight {name!r}")
            if int(np.prod(shape)) != arr.size:
                raise GraphError(f"weight {name!r}: cannot view array of shape {list(user_shape)} as {list(shape)}")
            arr = arr.reshape(shape)
        check_shape(arr.shape, f"weight {name!r}")
        v = self.add_node("const", {}, {"value": arr, "weight": name, "dynamic": bool(dynamic),
                                        "user_shape": user_shape}, [(tuple(arr.shape), "fp16")], name=name).out
        self.weights[name] = v
        return v

    def _compressed_weight(self, name, array, quant, dynamic, shape, qtype, quantize_tensor) -> Value:
        self._check_new_name(name, "weight")
        if dynamic:
            raise GraphError(f"weight {name!r}: a compressed weight is baked (its constexpr op is folded at "
                             f"compile); it cannot be dynamic - drop quant= or dynamic=True")
        if isinstance(quant, str):
            arr = np.asarray(array)
            try:
                q = quantize_tensor(arr, quant, fit=True)
            except QuantizationError as e:
                raise GraphError(f"weight {name!r}: {e}") from None
        elif isinstance(quant, qtype):
            q = quant
            if array is not None and tuple(np.shape(array)) != tuple(q.shape):
                raise GraphError(f"weight {name!r}: array shape {list(np.shape(array))} differs from its quantized "
                                 f"form's {list(q.shape)}")
        else:
            raise GraphError(f"weight {name!r}: quant must be a QuantizedTensor or a scheme name, got "
                             f"{type(quant).__name__}")
        user_shape = tuple(q.shape)
        if shape is not None:
            shape = check_shape(shape, f"weight {name!r}")
            q = expand_quantized(q, shape, f"weight {name!r}")
        check_shape(q.shape, f"weight {name!r}")
        # the value decodes at each use (QuantizedArray): a graph kept for recompiles (CompiledProgram's
        # source) holds the compressed operands only, not an fp16 copy of the weight per program set
        v = self.add_node("const", {}, {"value": QuantizedArray(q), "weight": name, "dynamic": False,
                                        "user_shape": user_shape, "quant": q}, [(tuple(q.shape), "fp16")],
                          name=name).out
        self.weights[name] = v
        return v

    def const(self, value, dtype: str = "fp16", name: str | None = None, keep_dtype: bool = False) -> Value:
        """An anonymous constant (a Python number gives a rank-0 scalar const). Float data is kept in
        float32 (rounded to ``dtype`` by the codegen) unless ``keep_dtype`` keeps the array as given."""
        check_dtype(dtype, "const")
        arr = np.asarray(value) if keep_dtype else np.asarray(
            value, dtype=NP_DTYPES[dtype] if dtype != "fp16" else np.float32)
        if arr.ndim:
            check_shape(arr.shape, "const")
        return self.add_node("const", {}, {"value": arr}, [(tuple(arr.shape), dtype)], name=name).out

    def output(self, name: str, value: Value, dtype: str | None = None) -> Value:
        """Declare a program output. ``dtype="fp32"`` adds a cast (host-side on M1/M2, C28)."""
        self._check_new_name(name, "output")
        self._check_member(value, f"output {name!r}")
        if dtype is not None and dtype != value.dtype:
            if dtype not in ("fp16", "fp32"):
                raise GraphError(f"output {name!r}: dtype {dtype} cannot be a program output; use fp16 or fp32 [C39]")
            value = BUILDERS["cast"](value, dtype, name=name)
        if value.dtype not in ("fp16", "fp32"):
            raise GraphError(f"output {name!r}: {value.dtype} tensors cannot be program outputs [C39]")
        self.outputs[name] = value
        return value

    def _check_member(self, v: Any, what: str) -> None:
        if not isinstance(v, Value):
            raise GraphError(f"{what}: expected a Value of this graph, got {type(v).__name__}")
        if v.node.graph is not self:
            raise GraphError(f"{what}: {v!r} belongs to graph {v.node.graph.name!r}, not {self.name!r}")

    def auto_name(self, stem: str) -> str:
        k = self._auto_names.get(stem, 0)
        self._auto_names[stem] = k + 1
        return f"{stem}_{k}"

    def __getattr__(self, item: str):
        # g.gelu(x), g.linear(x, w) ... forward to the op builders in ops/ (composites included)
        if item.startswith("_"):
            raise AttributeError(item)
        if item in BUILDERS:
            return BUILDERS[item]
        raise AttributeError(f"Graph has no attribute or op builder {item!r}")

    # --- traversal / analysis -------------------------------------------------------------------
    def uses(self) -> dict[Value, list[tuple[Node, str]]]:
        """Consumers of every value: ``{value: [(node, param), ...]}`` (graph outputs not included)."""
        table: dict[Value, list[tuple[Node, str]]] = {}
        for n in self.nodes:
            for k, v in n.inputs.items():
                for x in (v if isinstance(v, tuple) else (v,)):
                    table.setdefault(x, []).append((n, k))
        return table

    def topo_check(self) -> None:
        """Raises GraphError if a node uses a value defined later or never (a cycle or a foreign value)."""
        defined: set[int] = set()
        for n in self.nodes:
            for x in n.input_values():
                if not isinstance(x, Value) or id(x) not in defined:
                    if isinstance(x, Value) and x.node in self.nodes:
                        raise GraphError(f"cycle: {n.describe()} uses {x!r}, which is produced by a node that "
                                         f"depends on it (or comes later in the graph)")
                    raise GraphError(f"{n.describe()} uses {x!r}, which is not produced in graph {self.name!r}")
            for o in n.outputs:
                defined.add(id(o))
        for name, v in self.outputs.items():
            if id(v) not in defined:
                raise GraphError(f"output {name!r} refers to {v!r}, which is not produced in this graph")

    # --- rewriting ------------------------------------------------------------------------------
    def rewrite(self, fn: Callable[[Node], Any]) -> bool:
        """Visit nodes in order; ``fn(node)`` may build new nodes (placed where ``node`` was) and returns
        None (keep ``node``), or the Value / list of Values replacing ``node.outputs`` (node removed).
        Later uses and graph outputs are redirected. Returns True if anything changed."""
        old, self.nodes = self.nodes, []
        self._sink = self.nodes
        subst: dict[int, Value] = {}
        changed = False

        def remap(v: Value) -> Value:
            while id(v) in subst:
                v = subst[id(v)]
            return v

        try:
            for node in old:
                node.map_inputs(remap)
                result = fn(node)
                if result is None:
                    self.nodes.append(node)
                    continue
                changed = True
                new = result if isinstance(result, (list, tuple)) else [result]
                if len(new) != len(node.outputs):
                    raise GraphError(f"internal: rewrite of {node.describe()} returned {len(new)} values")
                for a, b in zip(node.outputs, new):
                    if a is not b:
                        subst[id(a)] = b
                if any(v is o for v in new for o in node.outputs):
                    self.nodes.append(node)
        finally:
            self._sink = self.nodes
        for k, v in self.outputs.items():
            self.outputs[k] = remap(v)
        return changed or len(old) != len(self.nodes)

    def replace_uses(self, old: Value, new: Value) -> None:
        for n in self.nodes:
            n.map_inputs(lambda v: new if v is old else v)
        for k, v in self.outputs.items():
            if v is old:
                self.outputs[k] = new

    def building_before(self, node: Node):
        """Context manager: nodes built inside are inserted just before ``node``."""
        return _InsertBefore(self, node)

    # --- copies ---------------------------------------------------------------------------------
    def clone(self) -> "Graph":
        """A structural copy (constant arrays are shared, never copied)."""
        g = Graph(self.name)
        g._ids = itertools.count(max((n.id for n in self.nodes), default=-1) + 1)
        g._auto_names = dict(self._auto_names)
        vmap: dict[int, Value] = {}
        for n in self.nodes:
            inputs = {k: (tuple(vmap[id(x)] for x in v) if isinstance(v, tuple) else vmap[id(v)])
                      for k, v in n.inputs.items()}
            m = Node(g, n.op, inputs, dict(n.attrs), n.name)
            m.id = n.id
            for o in n.outputs:
                c = Value(m, o.index, o.shape, o.dtype, o.name)
                c.mil_name = o.mil_name
                m.outputs.append(c)
                vmap[id(o)] = c
            g.nodes.append(m)
        g.inputs = {k: vmap[id(v)] for k, v in self.inputs.items()}
        g.outputs = {k: vmap[id(v)] for k, v in self.outputs.items()}
        g.weights = {k: vmap[id(v)] for k, v in self.weights.items() if id(v) in vmap}
        return g

    # --- display --------------------------------------------------------------------------------
    def __repr__(self) -> str:
        return (f"Graph({self.name!r}: {len(self.inputs)} inputs, {len(self.weights)} weights, "
                f"{len(self.nodes)} nodes, outputs {list(self.outputs)})")

    def _repr_html_(self) -> str:  # notebooks: tables of I/O and nodes, the compiler's notes (ir/display.py)
        return graph_html(self)

    def summary(self) -> str:
        """One line per node, for debugging passes."""
        lines = [repr(self)]
        for n in self.nodes:
            if n.op == "const":
                label = n.attrs.get("weight") or "const"
                lines.append(f"  {label}: {n.out.dtype}{list(n.out.shape)}")
            else:
                lines.append("  " + n.describe())
        for k, v in self.outputs.items():
            lines.append(f"  -> {k} = {v!r}")
        return "\n".join(lines)


class _InsertBefore:
    def __init__(self, graph: Graph, node: Node):
        self.graph, self.node = graph, node

    def __enter__(self):
        self.tmp: list[Node] = []
        self.graph._sink = self.tmp
        return self

    def __exit__(self, *exc):
        g = self.graph
        g._sink = g.nodes
        if exc[0] is None:
            i = g.nodes.index(self.node)
            g.nodes[i:i] = self.tmp
        return False
