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
    of a 1B model's load (its fp16 probe). A constant only convs read as their weight (directly or through
    reshapes) is not converted at all: conv widens a block of output channels at a time (fp16 and fp32 are exact
    in float64, so the products are the same), where a whole float64 copy of each weight cost the probe as much
    time as its products."""
    inputs = dict(inputs or {})
    keep = {id(v) for v in graph.outputs.values()} | {id(v) for v in values or ()}
    readers = _readers(graph)
    last = {x: rs[-1][0] for x, rs in readers.items()}     # id(value) -> index of the last node reading it
    weights = _conv_weights(graph, readers, keep)
    env: dict[int, np.ndarray] = {}
    lazy: dict[int, object] = {}              # id(value) -> its const node, not yet converted

    def read(x: Value) -> np.ndarray:
        a = env.get(id(x))
        if a is None:
            a = env[id(x)] = _const(lazy.pop(id(x)), consts, id(x) in weights)
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
            if id(n.out) in weights:             # a reshape on the way to a conv's weight: no float64 copy
                env[id(n.out)] = read(n.inputs["x"]).reshape(n.out.shape)
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


def _readers(graph: Graph) -> dict[int, list]:
    """id(value) -> [(index, node, input name)] of the nodes reading it, in graph order."""
    readers: dict[int, list] = {}
    for i, n in enumerate(graph.nodes):
        for k, v in n.inputs.items():
            for x in v if isinstance(v, tuple) else (v,):
                readers.setdefault(id(x), []).append((i, n, k))
    return readers


def _conv_weights(graph: Graph, readers: dict, keep: set) -> set:
    """ids of the values that only convs read, as their weight - directly or through reshapes - and that are not
    returned: they may stay in their stored precision."""
    out: set = set()
    for n in reversed(graph.nodes):           # a reshape's readers are decided before it
        if n.op not in ("const", "reshape") or id(n.out) in keep or id(n.out) not in readers:
            continue
        if all((r.op == "conv" and k == "weight") or (r.op == "reshape" and id(r.out) in out)
               for _, r, k in readers[id(n.out)]):
            out.add(id(n.out))
    return out


def _const(n, consts: dict | None, conv_weight: bool = False) -> np.ndarray:
    """A const node's value in float64 (through ``consts``, the cache across evaluations, when given); a conv's
    weight as stored when fp16 or fp32."""
    if consts is not None and id(n) in consts:
        a = consts[id(n)][1]                  # cached as stored for a conv: float64 for any other reader
        return a if conv_weight or a.dtype == np.float64 else np.asarray(a, dtype=np.float64)
    a = np.asarray(n.attrs["value"])
    if not (conv_weight and a.dtype in (np.float16, np.float32)):
        a = np.asarray(a, dtype=np.float64)
    if consts is not None:
        consts[id(n)] = (n, a)            # n: keeps the id valid
    return a
