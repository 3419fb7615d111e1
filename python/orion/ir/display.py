"""``Graph._repr_html_``: inputs, weights, outputs and nodes with shapes and dtypes, plus what the compiler
would say about the graph (``orion.compiler.lower`` run on a copy: its warnings, or why it refuses) -
never raising from a repr. The IR sits below the compiler, so the compiler hands its ``lower`` in
(:func:`set_lowering`, when ``orion.compiler`` is imported - as ``import orion`` does)."""

from __future__ import annotations

import warnings
from typing import Callable

from .. import _html

MAX_NODE_ROWS = 200                     # beyond this the node table shows the first ones and a count
CHECK_WEIGHT_BYTES = 64 * 1024 * 1024   # larger graphs are not lowered for a repr (it writes weight files)


_lower: Callable | None = None          # orion.compiler.lower, once the compiler registered it


def set_lowering(lower: Callable) -> None:
    """The compiler's ``lower(graph)``, which :func:`compiler_notes` runs (registered by ``orion.compiler``)."""
    global _lower
    _lower = lower


def _shape(v) -> str:
    return f"{v.dtype}{list(v.shape)}"


def compiler_notes(graph) -> list[str]:
    """What ``orion.compiler.lower(graph)`` warns about or why it refuses the graph, as text lines."""
    weight_bytes = sum(n.out.nbytes for n in graph.nodes if n.op == "const")
    if weight_bytes > CHECK_WEIGHT_BYTES:
        return [f"not checked here ({weight_bytes / 2**20:.0f} MiB of constants): run orion.compiler.lower(graph) "
                f"to see the compiler's warnings"]
    if not graph.outputs:
        return ["no outputs declared: the compiler refuses a graph without outputs (g.output(name, value))"]
    if _lower is None:
        return ["the compiler is not loaded: import orion.compiler to see its notes"]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lowered = _lower(graph)
    except Exception as e:  # noqa: BLE001 - a repr reports, it never raises
        return [f"the compiler refuses this graph: {type(e).__name__}: {e}"]
    return list(lowered.warnings) or ["the compiler accepts this graph without warnings"]


def graph_html(graph) -> str:
    io = [("input", name, _shape(v)) for name, v in graph.inputs.items()]
    io += [("weight" + (" (dynamic)" if v.node.attrs.get("dynamic") else ""), name, _shape(v))
           for name, v in graph.weights.items()]
    io += [("output", name, _shape(v)) for name, v in graph.outputs.items()]
    rows = []
    for n in graph.nodes[:MAX_NODE_ROWS]:
        if n.op in ("input", "const"):
            label = n.attrs.get("io_name") or n.attrs.get("weight") or ""
            args = ""
        else:
            label = n.name or ""
            args = ", ".join(f"{k}={','.join(_shape(x) for x in (v if isinstance(v, tuple) else (v,)))}"
                             for k, v in n.inputs.items())
        rows.append((n.id, n.op, label, args, ", ".join(_shape(o) for o in n.outputs)))
    more = len(graph.nodes) - len(rows)
    nodes = _html.table(("#", "op", "name", "operands", "result"), rows, code_cols=(1, 2))
    if more > 0:
        nodes += f"<div>... and {more} more nodes (graph.summary() lists all)</div>"
    return (_html.title("orion.Graph", graph.name, f"{len(graph.inputs)} inputs, {len(graph.weights)} weights, "
                                                   f"{len(graph.nodes)} nodes, {len(graph.outputs)} outputs")
            + _html.table(("kind", "name", "type"), io, code_cols=(1,))
            + _html.fold(f"nodes ({len(graph.nodes)})", nodes, open_=len(graph.nodes) <= 30)
            + _html.notes(compiler_notes(graph), "compiler"))
