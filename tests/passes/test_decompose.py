"""decompose: before/after — the rejected op is gone and the float64 result is unchanged."""

from __future__ import annotations

import numpy as np
import pytest

from compiler_helpers import apply_passes, ops_of
from orion.errors import CompileError
from orion.ir import Graph, evaluate, ops


def _roundtrip(build, shape=(1, 32, 1, 16), positive=False, **opts):
    g = Graph()
    x = g.input("x", shape)
    g.output("y", build(g, x))
    after, ctx = apply_passes(g, "decompose", **opts)
    a = np.random.default_rng(0).standard_normal(shape)
    a = np.abs(a) + 0.5 if positive else a
    np.testing.assert_allclose(evaluate(after, {"x": a})["y"], evaluate(g, {"x": a})["y"], rtol=1e-6, atol=1e-6)
    return g, after, ctx


@pytest.mark.parametrize("op,gone,present", [
    ("gelu", "gelu", ["tanh"]), ("silu", "silu", ["sigmoid"]), ("rsqrt", "rsqrt", ["pow"]),
])
def test_unary_lowerings(op, gone, present):
    before, after, _ = _roundtrip(lambda g, x: getattr(ops, op)(x), positive=op == "rsqrt")
    assert gone in ops_of(before) and gone not in ops_of(after)
    for p in present:
        assert p in ops_of(after)


def test_real_div_by_const_becomes_mul():
    _, after, _ = _roundtrip(lambda g, x: ops.div(x, 4.0))
    assert ops_of(after) == ["mul"]


def test_real_div_by_tensor_becomes_pow():
    _, after, _ = _roundtrip(lambda g, x: ops.div(x, ops.add(ops.mul(x, x), 1.0)))
    assert "real_div" not in ops_of(after) and "pow" in ops_of(after)


def test_reduce_mean_is_sum_times_reciprocal():
    _, after, _ = _roundtrip(lambda g, x: ops.reduce_mean(x, [1]))
    assert ops_of(after) == ["reduce_sum", "mul"]


def test_conv_bias_becomes_add():
    w = np.random.default_rng(1).standard_normal((8, 32, 1, 1))
    _, after, _ = _roundtrip(lambda g, x: ops.conv(x, w, bias=np.arange(8.0)))
    convs = [n for n in after.nodes if n.op == "conv"]
    assert len(convs) == 1 and "bias" not in convs[0].inputs and "add" in ops_of(after)


def test_sdpa_becomes_explicit_attention():
    def build(g, x):
        q = ops.reshape(x, (1, 4, 16, 8))
        m = np.triu(np.full((16, 16), -1e4), 1).reshape(1, 1, 16, 16)
        return ops.reshape(ops.scaled_dot_product_attention(q, q, q, m), (1, 32, 1, 16))
    _, after, _ = _roundtrip(build)
    assert "scaled_dot_product_attention" not in ops_of(after)
    assert ops_of(after).count("matmul") == 2 and "softmax" in ops_of(after)


def test_softmax_non_power_of_two_last_axis_is_explicit():
    _, after, ctx = _roundtrip(lambda g, x: ops.softmax(x, -1), shape=(1, 4, 8, 24))
    assert "softmax" not in ops_of(after) and "reduce_max" in ops_of(after)      # C21
    _, after, _ = _roundtrip(lambda g, x: ops.softmax(x, -1), shape=(1, 4, 8, 32))
    assert ops_of(after) == ["softmax"]
    _, after, _ = _roundtrip(lambda g, x: ops.softmax(x, -1), shape=(1, 4, 8, 24), softmax_pow2=False)
    assert ops_of(after) == ["softmax"]


def test_concat_output_becomes_several_outputs():
    g = Graph()
    x = g.input("x", (1, 32, 1, 16))
    g.output("y", ops.concat([ops.exp(x), ops.tanh(x)], axis=1))
    after, ctx = apply_passes(g, "decompose")
    assert "concat" not in ops_of(after)
    assert list(after.outputs) == ["y_part0", "y_part1"]
    b = ctx.io.outputs["y"]
    assert [p.key for p in b.parts] == ["y_part0", "y_part1"] and b.concat_axis == 1
    a = np.random.default_rng(3).standard_normal((1, 32, 1, 16))
    parts = evaluate(after, {"x": a})                        # the parts, joined as the host joins them
    joined = np.concatenate([parts[p.key] for p in b.parts], axis=b.concat_axis)
    np.testing.assert_allclose(joined, evaluate(g, {"x": a})["y"], rtol=1e-12)


def test_concat_feeding_an_op_is_rejected_with_a_suggestion():
    g = Graph()
    x = g.input("x", (1, 32, 1, 16))
    g.output("y", ops.exp(ops.concat([x, x], axis=1)))
    with pytest.raises(CompileError) as e:
        apply_passes(g, "decompose")
    assert e.value.constraint == "C01" and "separate outputs" in str(e.value)
    after, _ = apply_passes(g, "decompose", allow_concat=True)
    assert "concat" in ops_of(after)
