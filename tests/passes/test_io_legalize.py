"""io_legalize: sequence padding (retrace), boundary padding, output widening, live distinct outputs,
host-side fp32 on M1/M2 — all exact when undone on the host (checked in float64 and on the simulator)."""

from __future__ import annotations

import numpy as np

from compiler_helpers import assert_fp16_close, reference_program, run_sim, rng  # noqa: F401 (fixture)
from orion.compiler import lower
from orion.ir import Graph, evaluate, ops


def _decode_graph(rng, s=1, d=64, skv=64):
    """One decode step: the token's q/k/v projections attend over a KV cache passed as inputs."""
    g = Graph("decode")
    x = g.input("x", (1, d, 1, s))
    kc = g.input("k_cache", (1, d, 1, skv))
    vc = g.input("v_cache", (1, d, 1, skv))
    xn = ops.rms_norm(x, rng.uniform(0.5, 1.5, d))
    q = ops.rope(ops.linear(xn, rng.standard_normal((d, d)) / 8), 4, offset=7)
    o = ops.causal_attention(q, kc, vc, 4, mask=None)
    g.output("h", ops.add(x, ops.linear(o, rng.standard_normal((d, d)) / 8)))
    g.output("knew", ops.linear(xn, rng.standard_normal((d, d)) / 8))
    return g


def test_decode_step_is_retraced_to_16_or_more(rng):
    g = _decode_graph(rng)
    low = lower(g)
    b = low.io.inputs["x"]
    assert b.mil_shape[-1] >= 16 and b.mil_shape[-1] % 16 == 0 and b.pad_axis == 3
    assert low.stats["io_legalize"]["retraced_inputs"] == 1
    assert low.io.outputs["h"].parts[0].unpad == (("slice", 3, 1),)
    # every op result carrying the sequence is padded: no computed [1, 64, 1, 1] left in the program
    assert not [n for n in low.graph.nodes if n.op != "const" and n.out.shape == (1, 64, 1, 1)]
    assert low.io.outputs["h"].parts[0].mil_shape == (1, 64, 1, 384)        # 64 channels: 384 columns = 48 KiB
    a = {"x": rng.standard_normal((1, 64, 1, 1)), "k_cache": rng.standard_normal((1, 64, 1, 64)),
         "v_cache": rng.standard_normal((1, 64, 1, 64))}
    ref = evaluate(g, a)
    got = reference_program(low, a)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-9, atol=1e-12)
    sim = run_sim(g, {k: v.astype(np.float16) for k, v in a.items()})
    for k in ref:
        assert sim[k].shape == ref[k].shape
        assert_fp16_close(sim[k], ref[k], rtol=8 * 2 ** -10)


def test_self_attention_is_not_retraced_but_padded_at_the_boundary(rng):
    """Keys come from the padded input: padding S would change the softmax → boundary pad + slice."""
    g = Graph()
    x = g.input("x", (1, 64, 1, 8))
    g.output("y", ops.causal_attention(x, x, x, 4))
    low = lower(g)
    assert low.stats["io_legalize"].get("retrace_unsafe") == 1
    assert low.io.inputs["x"].mil_shape == (1, 64, 1, 384) and "x_unpad" in low.mil
    assert low.io.outputs["y"].parts[0].unpad[0][0] == "widen"
    a = {"x": rng.standard_normal((1, 64, 1, 8))}
    np.testing.assert_allclose(reference_program(low, a)["y"], evaluate(g, a)["y"], rtol=1e-9)


def test_every_surface_reaches_the_minimum(rng):
    g = Graph()
    x = g.input("x", (1, 32, 1, 64))                      # 4 KB
    s = g.input("s", (1, 1, 1, 64))                       # 128 B
    g.output("y", ops.mul(x, s))
    g.output("m", ops.reduce_sum(x, [1]))                 # [1, 1, 1, 64]
    low = lower(g)
    for b in low.io.inputs.values():
        assert np.prod(b.mil_shape) * 2 >= 49152
    for ob in low.io.outputs.values():
        for p in ob.parts:
            assert np.prod(p.mil_shape) * 2 >= 49152 and p.mil_shape[-1] >= 16
    a = {"x": rng.standard_normal((1, 32, 1, 64)), "s": rng.standard_normal((1, 1, 1, 64))}
    ref = evaluate(g, a)
    got = reference_program(low, a)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-12)
    sim = run_sim(g, {k: v.astype(np.float16) for k, v in a.items()})
    for k in ref:
        assert_fp16_close(sim[k], ref[k])


def test_large_surfaces_untouched(rng):
    g = Graph()
    x = g.input("x", (1, 768, 1, 64))
    g.output("y", ops.exp(x))
    low = lower(g)
    assert low.io.inputs["x"].mil_shape == (1, 768, 1, 64) and low.io.inputs["x"].pad_axis is None
    assert low.io.outputs["y"].parts[0].unpad == ()


def test_outputs_are_distinct_ops(rng):
    """C17: an output that is an input, or a value returned twice, gets its own identity op."""
    g = Graph()
    x = g.input("x", (1, 768, 1, 32))
    y = ops.exp(x)
    g.output("a", y)
    g.output("b", y)
    g.output("c", x)
    low = lower(g)
    vals = list(low.graph.outputs.values())
    assert len({id(v) for v in vals}) == 3 and all(v.op not in ("input", "const") for v in vals)
    assert low.mil.rstrip().endswith("} -> (a, b, c);\n}") or "-> (a, b, c);" in low.mil
    a = rng.standard_normal((1, 768, 1, 32)).astype(np.float16)
    got, ref = run_sim(g, {"x": a}), evaluate(g, {"x": a})       # each name still returns its own value
    assert set(got) == {"a", "b", "c"}
    for name in ref:
        assert_fp16_close(got[name], ref[name])


def test_ios16_moves_fp32_conversion_to_the_host(rng):
    g = Graph()
    x = g.input("x", (1, 768, 1, 32), dtype="fp32")
    g.output("y", ops.exp(x), dtype="fp32")
    low = lower(g, target="ios16")
    assert "cast" not in low.mil and "fp32" not in low.mil                 # C28
    assert low.io.inputs["x"].mil_dtype == "fp16" and low.io.inputs["x"].dtype == "fp32"
    a = rng.standard_normal((1, 768, 1, 32)).astype(np.float32) * 2   # exp stays inside fp16
    got = run_sim(g, {"x": a}, chip="m1", target="ios16")["y"]           # the host converts both ways
    assert got.dtype == np.float32
    assert_fp16_close(got, evaluate(g, {"x": a.astype(np.float16)})["y"])
    low18 = lower(g)
    assert "cast" in low18.mil and "tensor<fp32, [1, 768, 1, 32]> x" in low18.mil


def test_small_outputs_of_one_shape_share_one_widening_const(rng):
    """Each widening const is a weight slot (C18): outputs of the same shape widen with the same const,
    and every output still reads back exactly."""
    g = Graph()
    x = g.input("x", (1, 32, 1, 16))
    for i in range(3):
        g.output(f"y{i}", ops.mul(x, float(i + 1)))
    low = lower(g)
    widen = [n for n in low.graph.nodes if n.op == "const" and n.out.rank >= 1 and n.out.shape[-1] > 1
             and np.all(n.attrs.get("value") == 1)]
    assert len(widen) == 1
    a = {"x": rng.standard_normal((1, 32, 1, 16))}
    got = reference_program(low, a)
    for i in range(3):
        np.testing.assert_allclose(got[f"y{i}"], a["x"] * (i + 1), rtol=1e-9)
