"""identity_elim: before/after — neutral ops removed, layout chains merged, output names kept."""

from __future__ import annotations

import numpy as np

from compiler_helpers import apply_passes, ops_of, same_result
from orion.ir import Graph, ops


def test_identity_elim_removes_neutral_ops_and_merges_layout_chains():
    g = Graph()
    x = g.input("x", (1, 16, 1, 16))
    y = ops.identity(ops.mul(ops.add(x, 0.0), 1.0))
    y = ops.reshape(ops.reshape(y, (1, 4, 4, 16)), (1, 16, 16, 1))
    y = ops.transpose(ops.transpose(y, (0, 2, 1, 3)), (0, 2, 1, 3))
    g.output("y", ops.exp(y))
    after, _ = apply_passes(g, "identity_elim", "dce")
    assert ops_of(after) == ["reshape", "exp"]
    same_result(g, after)


def test_identity_elim_keeps_broadcasting_neutral_ops():
    g = Graph()
    x = g.input("x", (1, 1, 1, 16))
    g.output("y", ops.add(x, np.zeros((1, 8, 1, 1))))           # changes the shape: not an identity
    after, _ = apply_passes(g, "identity_elim")
    assert ops_of(after) == ["add"]


def test_identity_elim_output_name_survives():
    """Orion defect 4.1: removing an op must not rename an output (outputs are bound by name)."""
    g = Graph()
    x = g.input("x", (1, 16, 1, 16))
    g.output("b_out", ops.identity(ops.exp(x)))
    g.output("a_out", ops.identity(ops.tanh(x)))
    after, _ = apply_passes(g, "identity_elim", "dce")
    assert list(after.outputs) == ["b_out", "a_out"]
    assert after.outputs["b_out"].op == "exp" and after.outputs["a_out"].op == "tanh"
