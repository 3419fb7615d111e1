"""Graph._repr_html_: inputs, weights, outputs and nodes with their shapes and dtypes, the compiler's
notes (its warnings, or why it refuses the graph, without raising), and user strings escaped."""

import numpy as np

import orion
from orion.ir import display


def _graph(name="ffn"):
    g = orion.Graph(name)
    x = g.input("x", (1, 64, 1, 16))
    w = g.weight("w", np.ones((32, 64), np.float32), dynamic=True)
    g.output("y", orion.ops.relu(orion.ops.linear(x, w)))
    return g


def test_html_lists_io_nodes_shapes_and_dtypes():
    h = _graph()._repr_html_()
    assert "orion.Graph" in h and "ffn" in h
    assert "fp16[1, 64, 1, 16]" in h                  # input x
    assert "weight (dynamic)" in h and "fp16[32, 64]" in h
    assert "relu" in h and ">y<" in h.replace("<code>", ">").replace("</code>", "<")
    assert "the compiler accepts this graph without warnings" in h


def test_compiler_refusal_is_reported_not_raised():
    g = orion.Graph("no_outputs")
    g.input("x", (1, 64, 1, 16))
    h = g._repr_html_()                                # lower() would raise GraphError
    assert "no outputs declared" in h


def test_compiler_error_text_is_shown(monkeypatch):
    import orion.compiler.driver

    def refuse(graph):
        raise orion.CompileError("[C24] kernel too wide")
    monkeypatch.setattr(orion.compiler.driver, "lower", refuse)
    assert "the compiler refuses this graph: CompileError: [C24] kernel too wide" in display.compiler_notes(_graph())


def test_large_graphs_are_not_lowered_for_a_repr(monkeypatch):
    monkeypatch.setattr(display, "CHECK_WEIGHT_BYTES", 16)
    assert "not checked here" in " ".join(display.compiler_notes(_graph()))


def test_user_strings_are_escaped():
    g = _graph()
    g.name = "<script>alert(1)</script>"
    h = g._repr_html_()
    assert "<script>" not in h and "&lt;script&gt;" in h


def test_long_node_lists_are_cut(monkeypatch):
    monkeypatch.setattr(display, "MAX_NODE_ROWS", 2)
    g = _graph()
    assert f"and {len(g.nodes) - 2} more nodes" in g._repr_html_()


def test_compiler_warnings_are_listed(monkeypatch):
    import types

    import orion.compiler.driver
    monkeypatch.setattr(orion.compiler.driver, "lower",
                        lambda g: types.SimpleNamespace(warnings=["working set 40 MB [C26]"]))
    assert display.compiler_notes(_graph()) == ["working set 40 MB [C26]"]


def test_without_the_compiler_the_notes_say_so(monkeypatch):
    monkeypatch.setattr(display, "_lower", None)
    assert display.compiler_notes(_graph()) == ["the compiler is not loaded: import orion.compiler to see its notes"]


def test_a_weight_the_compiler_rejects_is_named():
    g = orion.Graph("bad")
    x = g.input("x", (1, 64, 1, 16))
    w = g.weight("w", np.full((32, 64), 1e6, np.float32))            # beyond fp16: refused (C37)
    g.output("y", orion.ops.linear(x, w))
    notes = display.compiler_notes(g)
    assert len(notes) == 1 and notes[0].startswith("the compiler refuses this graph") and "C37" in notes[0]
