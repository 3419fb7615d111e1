"""Float64 reference interpreter for graphs: the oracle for constant folding and the tests.

Uses each op's numpy reference from the registry; no fp16 rounding anywhere, so comparing a
simulator run against it measures the fp16 error of the whole program.
"""

from __future__ import annotations

import numpy as np

from .graph import Graph, GraphError, Value
from .ops import evaluate_node


def evaluate(graph: Graph, inputs: dict[str, np.ndarray] | None = None, values: list[Value] | None = None,
             consts: dict | None = None) -> dict[str, np.ndarray]:
    """Evaluate ``graph`` in float64. ``inputs`` by graph input name; returns outputs by name
    (or, with ``values``, ``{repr(v): array}`` for those values too, keyed by the Value itself).
    ``consts``: a cache of the float64 constants across evaluations of the same graph (a model's weights,
    converted once).

    A constant is converted to float64 when first read and every value is dropped after its last reader (unless
    returned): a model stage's weights in float64 are 4x their fp16 bytes, and held all at once they were the peak
    of a 1B model's load (its fp16 probe)."""
    inputs = dict(inputs or {})
    keep = {id(v) for v in graph.outputs.values()} | {id(v) for v in values or ()}
    last: dict[int, int] = {}                 # id(value) -> index of the last node reading it
    for i, n in enumerate(graph.nodes):
        for v in n.inputs.values():
            for x in v if isinstance(v, tuple) else (v,):
                last[id(x)] = i
    env: dict[int, np.ndarray] = {}
    lazy: dict[int, object] = {}              # id(value) -> its const node, not yet converted

    def read(x: Value) -> np.ndarray:
        a = env.get(id(x))
        if a is None:
            a = env[id(x)] = _const(lazy.pop(id(x)), consts)
        return a

    for i, n in enumerate(graph.nodes):
        if n.op == "input":
            key = n.attrs["io_name"]
            if key not in inputs:
                raise GraphError(f"reference: missing input {key!r}")
            arr = np.asarray(inputs[key], dtype=np.float64)
            if arr.shape != n.out.shape:
                raise GraphError(f"reference: input {key!r} has shape {list(arr.shape)}, graph says "
                                 f"{list(n.out.shape)}")
            env[id(n.out)] = arr
        elif n.op == "const":
            lazy[id(n.out)] = n
        else:
            args = {k: (tuple(read(x) for x in v) if isinstance(v, tuple) else read(v))
                    for k, v in n.inputs.items()}
            for o, r in zip(n.outputs, evaluate_node(n.op, args, n.attrs)):
                env[id(o)] = r.reshape(o.shape)
            del args
            for v in n.inputs.values():
                for x in v if isinstance(v, tuple) else (v,):
                    if last[id(x)] == i and id(x) not in keep:
                        env.pop(id(x), None)
    out = {k: read(v) for k, v in graph.outputs.items()}
    for v in values or ():
        out[v] = read(v)
    return out


def _const(n, consts: dict | None) -> np.ndarray:
    """A const node's value in float64 (through ``consts``, the cache across evaluations, when given)."""
    if consts is None:
        return np.asarray(n.attrs["value"], dtype=np.float64)
    if id(n) not in consts:
        consts[id(n)] = (n, np.asarray(n.attrs["value"], dtype=np.float64))   # n: keeps the id valid
    return consts[id(n)][1]
