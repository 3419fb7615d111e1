"""Graph IR: build-time shape/dtype inference and the errors a bad graph raises where it is built."""

from __future__ import annotations

import numpy as np
import pytest

from orion.errors import OrionError
from orion.ir import Graph, GraphError, evaluate, ops


def test_shapes_inferred_at_build():
    g = Graph()
    x = g.input("x", (1, 64, 1, 32))
    y = ops.linear(x, np.zeros((128, 64)))
    assert y.shape == (1, 128, 1, 32) and y.dtype == "fp16"
    assert ops.reduce_sum(y, [1]).shape == (1, 1, 1, 32)
    assert ops.reduce_sum(y, [1], keep_dims=False).shape == (1, 1, 32)
    assert ops.matmul(ops.reshape(y, (1, 4, 32, 32)), ops.reshape(y, (1, 4, 32, 32)), transpose_y=True).shape == \
        (1, 4, 32, 32)
    assert ops.reshape(y, (1, -1, 1, 32)).shape == (1, 128, 1, 32)
    assert (x * 2.0 + 1.0).shape == x.shape and (2.0 * x).op == "mul" and (-x).op == "mul"
    assert x[:, 8:16].shape == (1, 8, 1, 32) and x[..., ::2].shape == (1, 64, 1, 16)


def test_broadcast_error_names_op_and_shapes():
    g = Graph()
    x = g.input("x", (1, 768, 1, 64))
    y = g.input("y", (1, 512, 1, 1))
    with pytest.raises(GraphError) as e:
        ops.add(x, y)
    msg = str(e.value)
    assert "add" in msg and "[1, 768, 1, 64]" in msg and "[1, 512, 1, 1]" in msg and "axis 1" in msg
    assert isinstance(e.value, OrionError) and isinstance(e.value, ValueError)


@pytest.mark.parametrize("build,fragment", [
    (lambda g, x: ops.matmul(x, x), "inner dimensions differ"),
    (lambda g, x: ops.conv(x, np.zeros((8, 3, 1, 1))), "input channels"),
    (lambda g, x: ops.reshape(x, (1, 100)), "cannot reshape"),
    (lambda g, x: ops.transpose(x, (0, 1, 2, 2)), "not a permutation"),
    (lambda g, x: ops.softmax(x, axis=4), "out of range"),
    (lambda g, x: ops.slice_by_size(x, (0, 60, 0, 0), (1, 8, 1, 32)), "exceeds"),
    (lambda g, x: ops.reshape(x, (1, 2, 2, 2, 2, 256)), "C23"),
    (lambda g, x: ops.add(x, ops.cast(x, "fp32")), "must have the same dtype (insert a cast)"),
    (lambda g, x: ops.cast(x, "int8"), "unsupported target dtype"),
    (lambda g, x: x[:, 3], "only slices"),
    (lambda g, x: ops.linear(x, np.zeros((8, 32))), "must be [1, 32, 1, S]"),
    (lambda g, x: ops.causal_attention(x, x, x, n_heads=5), "divide"),
    (lambda g, x: ops.rope(x, 4, layout="weird"), "layout"),
])
def test_bad_ops_fail_where_built(build, fragment):
    g = Graph()
    x = g.input("x", (1, 64, 1, 32))
    with pytest.raises(GraphError, match=None) as e:
        build(g, x)
    assert fragment in str(e.value)


def test_duplicate_and_bad_names():
    g = Graph()
    x = g.input("x", (1, 8, 1, 16))
    with pytest.raises(GraphError, match="duplicate name 'x'"):
        g.input("x", (1, 8, 1, 16))
    with pytest.raises(GraphError, match="duplicate name 'x'"):
        g.weight("x", np.zeros(4))
    g.output("y", ops.exp(x))
    with pytest.raises(GraphError, match="duplicate name 'y'"):
        g.output("y", ops.exp(x))
    with pytest.raises(GraphError, match="identifier"):
        g.input("bad name", (1, 8, 1, 16))
    with pytest.raises(GraphError, match="C39"):
        g.input("b", (1, 8, 1, 16), dtype="bool")


def test_values_from_another_graph_are_rejected():
    g1, g2 = Graph("a"), Graph("b")
    x = g1.input("x", (1, 8, 1, 16))
    y = g2.input("y", (1, 8, 1, 16))
    with pytest.raises(GraphError, match="belongs to graph 'a'"):
        ops.add(y, x)
    with pytest.raises(GraphError, match="belongs to graph"):
        g2.output("out", x)


def test_cycle_detected():
    g = Graph()
    x = g.input("x", (1, 8, 1, 16))
    a = ops.exp(x)
    b = ops.tanh(a)
    a.node.inputs["x"] = b                   # a = exp(tanh(a)): a cycle
    g.output("y", b)
    with pytest.raises(GraphError, match="cycle"):
        g.topo_check()
    from orion.compiler import lower
    with pytest.raises(GraphError, match="cycle"):
        lower(g)


def test_no_outputs_rejected():
    from orion.compiler import lower
    g = Graph()
    g.input("x", (1, 8, 1, 16))
    with pytest.raises(GraphError, match="no outputs"):
        lower(g)


def test_clone_is_independent_and_compile_does_not_mutate():
    from orion.compiler import lower
    g = Graph()
    x = g.input("x", (1, 8, 1, 16))
    g.output("y", ops.gelu(x))
    before = g.summary()
    h = g.clone()
    assert h.summary() == before
    lower(g)
    assert g.summary() == before
    a = np.random.default_rng(0).standard_normal((1, 8, 1, 16))
    np.testing.assert_array_equal(evaluate(g, {"x": a})["y"], evaluate(h, {"x": a})["y"])


def test_graph_method_sugar():
    g = Graph()
    x = g.input("x", (1, 8, 1, 16))
    assert g.gelu(x).op == "gelu" and g.linear(x, np.zeros((4, 8))).shape == (1, 4, 1, 16)
    with pytest.raises(AttributeError):
        g.no_such_op(x)


def test_the_builder_table_is_ops():
    # Value's operators and g.<op>() reach the builders through graph.BUILDERS (graph.py imports no builder):
    # every entry is the function ops exports under that name, the composites included (layer_norm: the
    # composite, as ops.layer_norm), and every op builder of the schema is in it
    from orion.ir.graph import BUILDERS
    assert all(getattr(ops, name) is fn for name, fn in BUILDERS.items())
    assert BUILDERS["layer_norm"] is ops.layer_norm is not ops.normalization.layer_norm
    assert {"linear", "rms_norm", "getitem", "reduce_max"} <= set(BUILDERS)
    assert {row["builder"] for row in ops.schema() if row["builder"] and "." not in row["builder"]} <= set(BUILDERS)
    g = Graph()
    x = g.input("x", (1, 8, 1, 16), dtype="fp32")          # the fp32 input's cast comes from the table too
    assert x.op == "cast" and (x + 1.0).op == "add" and (-x).op == "mul" and x[..., 2:6].shape == (1, 8, 1, 4)
    assert g.output("y", x.reshape(1, 8, 4, 4), dtype="fp32").op == "cast"


def test_weight_reshape_keeps_user_shape():
    g = Graph()
    w = g.weight("w", np.zeros((16, 8)), shape=(16, 8, 1, 1))
    assert w.shape == (16, 8, 1, 1) and w.node.attrs["user_shape"] == (16, 8)
    with pytest.raises(GraphError, match="cannot view"):
        g.weight("v", np.zeros((16, 8)), shape=(16, 9, 1, 1))
    with pytest.raises(GraphError, match="floating-point"):
        g.weight("i", np.zeros(4, dtype=np.int64))
