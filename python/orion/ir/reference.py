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
    converted once)."""
    inputs = dict(inputs or {})
    env: dict[int, np.ndarray] = {}
    for n in graph.nodes:
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
            if consts is None:
                env[id(n.out)] = np.asarray(n.attrs["value"], dtype=np.float64)
            else:
                if id(n) not in consts:
                    consts[id(n)] = (n, np.asarray(n.attrs["value"], dtype=np.float64))   # n: keeps the id valid
                env[id(n.out)] = consts[id(n)][1]
        else:
            args = {k: (tuple(env[id(x)] for x in v) if isinstance(v, tuple) else env[id(v)])
                    for k, v in n.inputs.items()}
            for o, r in zip(n.outputs, evaluate_node(n.op, args, n.attrs)):
                env[id(o)] = r.reshape(o.shape)
    out = {k: env[id(v)] for k, v in graph.outputs.items()}
    for v in values or ():
        out[v] = env[id(v)]
    return out
