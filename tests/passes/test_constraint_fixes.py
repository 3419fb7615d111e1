"""One graph per ANE constraint (orion.sim.constraints()) that applies to MIL: it either shows the automatic
fix (and the fixed program, run on the strict simulator, computes the source graph's function: the float64
reference of orion.ir.evaluate within fp16 tolerance) or the CompileError carrying the constraint ID."""

from __future__ import annotations

import re

import numpy as np
import pytest

from compiler_helpers import assert_fp16_close, run_sim
from orion.compiler import lower
from orion.errors import CompileError, InputError
from orion.ir import Graph, GraphError, evaluate, ops
from orion.compiler.passes import CompileWarning, default_pipeline

X = (1, 256, 1, 128)


def _g(build, shape=X, name="y"):
    g = Graph()
    x = g.input("x", shape)
    g.output(name, build(g, x))
    return g


def _without(*names):
    return [p for p in default_pipeline() if p not in names]


def _err(g, cid, **kw):
    with pytest.raises(CompileError) as e:
        lower(g, **kw)
    assert e.value.constraint == cid, str(e.value)
    assert f"[{cid}]" in str(e.value)
    return e.value


def _computes_source(g, x=None, **kw):
    """The rewritten program, run on the strict simulator, computes the source graph: every output equals
    orion.ir.evaluate's float64 reference of ``g`` within fp16 tolerance (``x``: default standard normal)."""
    if x is None:
        x = np.random.default_rng(0).standard_normal(g.inputs["x"].shape)
    x = np.asarray(x, np.float16)                             # the device's values; the reference sees the same
    got = run_sim(g, {"x": x}, **kw)
    ref = evaluate(g, {"x": x})
    assert set(got) == set(ref)
    for name in ref:
        assert np.isfinite(ref[name]).all(), f"{name}: the test input overflows the reference itself"
        assert_fp16_close(got[name], ref[name])


def test_c01_concat():
    g = _g(lambda g, x: ops.concat([x, ops.exp(x)], axis=1))
    assert "concat(" not in lower(g).mil
    _computes_source(g)
    _err(_g(lambda g, x: ops.exp(ops.concat([x, x], axis=1))), "C01")


def test_c03_c13_io_names():
    g = Graph()
    a = g.input("Kv", X)
    b = g.input("k_v", X)
    g.output("B", ops.add(a, b))                              # "B"/"a": lower-cased, consistent
    g.output("a", ops.sub(a, b))
    low = lower(g)
    assert "-> (b, a);" in low.mil
    ins = [v.mil_name for v in low.graph.inputs.values()]     # "kv"/"k_v": '_' vs 'v' depends on collation
    assert ins == ["i01_kv", "i00_k_v"]


def test_c04_small_surfaces_are_padded():
    g = _g(lambda g, x: ops.exp(x), shape=(1, 16, 1, 4))
    low = lower(g)
    assert low.io.inputs["x"].mil_shape[-1] * 16 * 2 >= 49152
    _computes_source(g)


def test_c06_sdpa_never_emitted():
    # a causal mask: the ANE ignores SDPA's mask (C06), so the decomposition must apply it itself
    mask = np.triu(np.full((64, 64), -1e4), 1).reshape(1, 1, 64, 64)

    def build(g, x):
        q = ops.reshape(x, (1, 4, 64, 128))
        return ops.reshape(ops.scaled_dot_product_attention(q, q, q, mask), X)
    g = _g(build)
    assert "scaled_dot_product_attention" not in lower(g).mil
    _computes_source(g)
    _err(g, "C06", pipeline=_without("decompose"))


@pytest.mark.parametrize("op,cid", [("gelu", "C10"), ("rsqrt", "C20"), ("reduce_mean", "C27")])
def test_rejected_ops(op, cid):
    build = (lambda g, x: ops.reduce_mean(x, [1])) if op == "reduce_mean" else (lambda g, x: getattr(ops, op)(x))
    g = _g(build)
    assert f"{op}(" not in lower(g).mil
    x = np.random.default_rng(1).standard_normal(X) * 3       # gelu: both tails and the bend around 0
    if op == "rsqrt":
        x = np.abs(x) + 0.05                                  # rsqrt's domain, from 0.05 (20x) to ~10
    elif op == "reduce_mean":
        x = x + np.linspace(-4, 4, X[1]).reshape(1, -1, 1, 1)   # a mean far from 0 (a sum or wrong axis shows)
    _computes_source(g, x)
    _err(g, cid, pipeline=_without("decompose"))


def test_c15_matmul_flags_are_named_consts():
    g = _g(lambda g, x: ops.reshape(ops.matmul(ops.reshape(x, (1, 4, 64, 128)), ops.reshape(x, (1, 4, 64, 128)),
                                               transpose_y=True), (1, 4, 64, 64)), name="y")
    mil = lower(g).mil
    for m in re.finditer(r"matmul\(([^)]*)\)", mil):
        args = dict(kv.split(" = ") for kv in m.group(1).split(", "))
        assert re.fullmatch(r"[A-Za-z_]\w*", args["transpose_x"]) and re.fullmatch(r"[A-Za-z_]\w*", args["transpose_y"])


def test_c16_conv_bias():
    rng = np.random.default_rng(2)
    w, bias = rng.standard_normal((256, 256, 1, 1)) / 16, np.linspace(-3, 3, 256)   # one bias per out channel
    g = _g(lambda g, x: ops.conv(x, w, bias=bias))
    assert "bias" not in lower(g).mil
    _computes_source(g)
    _err(g, "C16", pipeline=_without("decompose"))


def test_c17_outputs_are_live_op_results():
    g = Graph()
    x = g.input("x", X)
    g.output("y", x)
    assert "identity(" in lower(g).mil
    _computes_source(g)
    _err(g, "C17", pipeline=_without("io_legalize"))


def _many_weights(n, with_pow=False):
    g = Graph()
    x = g.input("x", X)
    y = x
    for i in range(n):
        y = ops.mul(y, g.weight(f"w{i}", np.full((1, 256, 1, 1), 1.5 + i / 100)))
    if with_pow:
        y = ops.pow(ops.add(ops.mul(y, y), 1.0), -0.5)
    g.output("y", y)
    return g


def test_c18_weight_files():
    g = _many_weights(17)
    low = lower(g)                                            # default: one multi-blob file
    assert len(low.weights) == 1 and low.mil.count("BLOBFILE") == 17
    _err(g, "C18", weight_layout="per_tensor")
    _err(g, "C18", count_weight_tensors=True)
    assert len(lower(_many_weights(16), weight_layout="per_tensor").weights) == 16


def test_c19_pow_costs_a_slot():
    _err(_many_weights(16, with_pow=True), "C19", weight_layout="per_tensor")
    lower(_many_weights(15, with_pow=True), weight_layout="per_tensor")


def test_c21_softmax_non_power_of_two():
    g = _g(lambda g, x: ops.softmax(ops.reshape(x, (1, 256, 2, 64)), axis=-1) if False else
           ops.reshape(ops.softmax(ops.reshape(x[..., 0:96], (1, 256, 1, 96)), axis=-1), (1, 256, 1, 96)))
    assert "softmax(" not in lower(g).mil
    _computes_source(g)
    _err(g, "C21", pipeline=_without("decompose"))


def test_c22_axis_limit():
    g = Graph()
    x = g.input("x", (1, 64, 1, 16))
    # distinct rows: the two halves put back in the wrong order or at the wrong offset differ
    g.output("logits", ops.linear(x, np.random.default_rng(3).standard_normal((70000, 64)).astype(np.float16) / 8))
    low = lower(g)
    assert len(low.io.outputs["logits"].parts) == 2
    _computes_source(g)
    with pytest.raises(GraphError, match="C22"):
        Graph().input("x", (1, 70000, 1, 0))


def test_c23_rank():
    g = Graph()
    x = g.input("x", (1, 64, 1, 16))
    with pytest.raises(GraphError, match="C23"):
        ops.reshape(x, (1, 2, 2, 2, 2, 64))


def test_c24_kernel_width():
    g = _g(lambda g, x: ops.conv(x, np.zeros((8, 256, 1, 17)), pad_type="same"))
    _err(g, "C24")
    w15 = np.random.default_rng(4).standard_normal((8, 256, 1, 15)) / 64
    _computes_source(_g(lambda g, x: ops.conv(x, w15, pad_type="same")))
    _err(_g(lambda g, x: ops.conv(x, np.zeros((8, 256, 1, 15)), pad_type="same")), "C24", chip="m1")


def test_c25_contraction_split_or_error():
    g = Graph()
    x = g.input("x", (1, 32000, 1, 16))
    w = np.random.default_rng(5).standard_normal((16, 32000)).astype(np.float16) / 64
    g.output("y", ops.linear(x, w))
    assert lower(g).mil.count("= conv(") == 4
    # the four partial contractions summed: a dropped or doubled chunk is off by ~1/4 of the result
    _computes_source(g, np.random.default_rng(6).standard_normal((1, 32000, 1, 16)) + 0.5)
    _err(g, "C25", pipeline=_without("limits"))


def test_c26_sram_warning():
    with pytest.warns(CompileWarning, match="C26"):
        lower(_g(lambda g, x: ops.linear(x, np.zeros((256, 256), np.float16))), sram_warn_bytes=1 << 16)


def test_c28_c29_legacy_dialect():
    g = Graph()
    x = g.input("x", X, dtype="fp32")
    g.output("y", ops.exp(x), dtype="fp32")
    mil = lower(g, target="ios16").mil
    assert mil.startswith("program(1.0)") and "func main<ios16>" in mil and "cast(" not in mil
    assert "tensor<string, []>(" in mil
    _computes_source(g, chip="m1")
    _err(g, "C28", target="ios16", pipeline=_without("io_legalize"))


def test_c30_matmul_warned_on_m1_m2():
    g = _g(lambda g, x: ops.reshape(ops.matmul(ops.reshape(x, (1, 4, 64, 128)), ops.reshape(x, (1, 4, 128, 64))),
                                    (1, 256, 1, 64)))
    with pytest.warns(CompileWarning, match="C30"):
        lower(g, target="ios16")


def test_c33_mul_by_zero_after_reduce():
    g = _g(lambda g, x: ops.add(x, ops.mul(ops.reduce_sum(x, [1]), 0.0)))
    assert "mul(" not in lower(g).mil
    # channel sums ~25600 (a kept sum instead of sum * 0 is far off); mul(s, 0) folds to sub(s, s), which
    # keeps IEEE's NaN for an overflowed s - so the sums stay inside fp16 here, where the answer is y == x
    _computes_source(g, 100 + np.random.default_rng(7).standard_normal(X))
    _err(g, "C33", pipeline=_without("constant_fold"))


def test_c34_inputs_sliced_by_size():
    w = np.linspace(0.5, 2, 256).reshape(1, -1, 1, 1)
    g = _g(lambda g, x: ops.rms_norm(x, w), shape=(1, 256, 1, 16))
    assert "slice_by_index" not in lower(g).mil
    x = 3 * np.random.default_rng(8).standard_normal((1, 256, 1, 16)).astype(np.float16)
    _computes_source(g, x)
    want = x / np.sqrt(np.mean(np.float64(x) ** 2, axis=1, keepdims=True) + 1e-5) * w   # RMSNorm's definition
    np.testing.assert_allclose(evaluate(g, {"x": x})["y"], want, rtol=1e-6)   # float32 constants


def test_c36_attention_scales_q_first():
    g = Graph()
    x = g.input("x", (1, 256, 1, 64))
    g.output("y", ops.causal_attention(x, x, x, 4))
    low = lower(g)
    mm = next(n for n in low.graph.nodes if n.op == "matmul")
    assert mm.inputs["x"].op == "mul"                        # q * 1/sqrt(d) feeds Q·Kᵀ
    # |q|^2 = 64 * 25^2 = 40000 > 32752: unscaled, Q·Kᵀ saturates to inf on the device; scaled first, 5000
    signs = np.where(np.random.default_rng(9).random((1, 256, 1, 64)) < 0.5, -1.0, 1.0)
    _computes_source(g, 25 * signs)


def test_c37_non_finite_weights_and_fp32_compute():
    g = _g(lambda g, x: ops.mul(x, g.weight("w", np.array([1.0, np.nan, 1e6] + [1.0] * 253).reshape(1, 256, 1, 1))))
    with pytest.raises(InputError, match="'w'.*2 of 256") as e:
        lower(g)
    assert e.value.constraint == "C37"
    with pytest.warns(CompileWarning, match="C37"):
        lower(g, non_finite="warn")
    g = Graph()
    x = g.input("x", X)
    h = ops.cast(x, "fp32")
    g.output("y", ops.cast(ops.exp(h), "fp16"))
    _err(g, "C37")


def test_c38_norms_are_decomposed():
    gamma, beta = np.linspace(0.5, 2, 256).reshape(1, -1, 1, 1), np.linspace(-1, 1, 256).reshape(1, -1, 1, 1)
    g = _g(lambda g, x: ops.layer_norm(x, gamma, beta))
    mil = lower(g).mil
    assert "layer_norm(" not in mil and "pow(" in mil
    x = (2 + 3 * np.random.default_rng(10).standard_normal(X)).astype(np.float16)   # mean 2: centring matters
    _computes_source(g, x)
    xc = x - np.mean(np.float64(x), axis=1, keepdims=True)                           # LayerNorm's definition
    want = xc / np.sqrt(np.mean(xc ** 2, axis=1, keepdims=True) + 1e-5) * gamma + beta
    np.testing.assert_allclose(evaluate(g, {"x": x})["y"], want, rtol=1e-6, atol=1e-6)


def test_c39_bool_io():
    with pytest.raises(GraphError, match="C39"):
        Graph().input("m", X, dtype="bool")


def test_c40_duplicate_names_detected():
    from orion.compiler.passes import PASSES
    g = _g(lambda g, x: ops.exp(ops.tanh(x)))

    def clash(graph, ctx):
        PASSES["names"](graph, ctx)
        nodes = [n for n in graph.nodes if n.op in ("exp", "tanh")]
        nodes[0].out.mil_name = nodes[1].out.mil_name
    with pytest.raises(CompileError) as e:
        lower(g, pipeline=default_pipeline()[:-1] + [clash, "validate"])
    assert e.value.constraint == "C40"
