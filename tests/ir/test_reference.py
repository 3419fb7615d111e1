"""orion.ir.evaluate (the float64 reference, the models' fp16 probe): each constant becomes float64 only when first
read and every value is dropped after its last reader, so a deep graph's weights are never all in float64 at once
- and the results, the tapped values and the constants cache are what they were."""

import tracemalloc

import numpy as np

from orion.ir import Graph, evaluate, ops

D, LAYERS = 256, 12


def _stack(weights_first: bool):
    """LAYERS linears of D x D fp16 weights with a residual add each; ``weights_first``: every weight constant
    declared before any op (read late)."""
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((D, D)) / 16).astype(np.float16) for _ in range(LAYERS)]
    g = Graph()
    x = g.input("x", (1, D, 1, 4))
    consts = [g.weight(f"w{i}", w) for i, w in enumerate(ws)] if weights_first else None
    h, mids = x, []
    for i, w in enumerate(ws):
        h = ops.add(h, ops.linear(h, consts[i] if consts else g.weight(f"w{i}", w)))
        mids.append(h)
    g.output("y", h)
    return g, ws, mids


def _numpy(ws, x):
    h = x[0, :, 0, :]
    outs = []
    for w in ws:
        h = h + w.astype(np.float64) @ h
        outs.append(h)
    return outs


def test_weights_are_float64_one_at_a_time():
    x = np.random.default_rng(1).standard_normal((1, D, 1, 4))
    one = D * D * 8                                    # one weight in float64
    for first in (False, True):
        g, ws, mids = _stack(first)
        tracemalloc.start()
        out = evaluate(g, {"x": x}, values=[mids[3]])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        want = _numpy(ws, x)
        np.testing.assert_allclose(out["y"][0, :, 0, :], want[-1], rtol=1e-12)
        np.testing.assert_allclose(out[mids[3]][0, :, 0, :], want[3], rtol=1e-12)   # a tapped value survives
        assert peak < 3 * one, f"peak {peak} bytes: more than one weight's float64 copy at a time"


def test_the_constants_cache_holds_every_weight_once_as_stored():
    """The sampler's cache across evaluations: each conv weight once, fp16 as stored (convs widen blocks of it)."""
    g, ws, _ = _stack(False)
    x = np.random.default_rng(1).standard_normal((1, D, 1, 4))
    cache: dict = {}
    a = evaluate(g, {"x": x}, consts=cache)
    held = [v for _, v in cache.values() if v.size == D * D]
    b = evaluate(g, {"x": x}, consts=cache)
    assert len(held) == LAYERS and all(v.dtype == np.float16 for v in held)
    np.testing.assert_array_equal(a["y"], b["y"])


def test_conv_weights_kept_as_stored_give_the_float64_products_bit_for_bit():
    """fp16 weights read by convs (through the linear's reshape) are widened a block at a time: the same bits as
    the same weights given in float64; a weight also read by another op, or returned, is converted whole."""
    g16, ws, _ = _stack(False)
    g64 = Graph()
    x = g64.input("x", (1, D, 1, 4))
    h = x
    for i, w in enumerate(ws):
        h = ops.add(h, ops.linear(h, g64.weight(f"w{i}", w.astype(np.float64))))
    g64.output("y", h)
    xs = np.random.default_rng(2).standard_normal((1, D, 1, 4))
    np.testing.assert_array_equal(evaluate(g16, {"x": xs})["y"], evaluate(g64, {"x": xs})["y"])
    g = Graph()
    x = g.input("x", (1, 4, 1, 2))
    w = g.weight("w", np.arange(16, dtype=np.float16).reshape(4, 4) / 8)
    g.output("y", ops.linear(x, w))
    g.output("w_out", w)                                # returned: float64 like every output
    out = evaluate(g, {"x": np.ones((1, 4, 1, 2))})
    assert out["w_out"].dtype == np.float64 and out["y"].dtype == np.float64
    np.testing.assert_array_equal(out["y"][0, :, 0, 0], (np.arange(16).reshape(4, 4) / 8).sum(1))


def test_an_output_that_is_a_constant_or_an_input():
    g = Graph()
    x = g.input("x", (1, 2, 1, 3))
    g.output("c_out", g.weight("c", np.ones((1, 2, 1, 3), np.float16)))
    g.output("x_out", x)
    g.output("y", ops.add(x, x))
    out = evaluate(g, {"x": np.full((1, 2, 1, 3), 2.0)})
    assert out["c_out"].dtype == np.float64 and (out["c_out"] == 1).all() and (out["x_out"] == 2).all() and (out["y"] == 4).all()


def _matmul_stack():
    """LAYERS matmuls of the stream by D x D fp16 constants (not conv weights: converted to float64 when read)."""
    rng = np.random.default_rng(3)
    ws = [(rng.standard_normal((D, D)) / 16).astype(np.float16) for _ in range(LAYERS)]
    g = Graph()
    h = g.input("x", (1, 1, 4, D))
    for i, w in enumerate(ws):
        h = ops.add(h, ops.matmul(h, g.weight(f"m{i}", w.reshape(1, 1, D, D))))
    g.output("y", h)
    return g, ws


def test_float64_constants_are_dropped_after_their_last_reader():
    g, ws = _matmul_stack()
    x = np.random.default_rng(1).standard_normal((1, 1, 4, D))
    tracemalloc.start()
    out = evaluate(g, {"x": x})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    h = x[0, 0]
    for w in ws:
        h = h + h @ w.astype(np.float64)
    np.testing.assert_allclose(out["y"][0, 0], h, rtol=1e-12)
    assert peak < 4 * D * D * 8, f"peak {peak} bytes: float64 constants held past their last reader"


def test_a_weight_read_by_a_conv_and_another_op_is_float64_for_the_other():
    """A constant that a conv and an elementwise op both read is converted whole (not a conv-only weight); a
    reshape of a computed value on its way to a conv weight is freed after its reader; a cached conv weight
    tapped later comes back float64."""
    g = Graph()
    x = g.input("x", (1, 4, 1, 2))
    w = g.weight("w", (np.arange(16, dtype=np.float16).reshape(4, 4) / 8))
    y = ops.linear(x, w)
    g.output("y", y)
    g.output("wsum", ops.add(w, w))
    w2 = ops.mul(g.weight("v", np.full((4, 4), 0.5, np.float16)), 2.0)     # computed, then reshaped for the conv
    g.output("z", ops.linear(x, w2))
    xs = np.ones((1, 4, 1, 2))
    out = evaluate(g, {"x": xs})
    wd = np.arange(16).reshape(4, 4) / 8
    np.testing.assert_array_equal(out["wsum"], 2 * wd)
    assert out["wsum"].dtype == np.float64
    np.testing.assert_array_equal(out["y"][0, :, 0, 0], wd.sum(1))
    np.testing.assert_array_equal(out["z"][0, :, 0, 0], np.full(4, 4.0))
    g2, _, mids = _stack(False)
    cache: dict = {}
    evaluate(g2, {"x": np.ones((1, D, 1, 4))}, consts=cache)
    weight = next(v for v in g2.weights.values())
    tapped = evaluate(g2, {"x": np.ones((1, D, 1, 4))}, values=[weight], consts=cache)
    assert tapped[weight].dtype == np.float64


def test_a_computed_conv_weight_is_dropped_after_its_reshape():
    """A conv weight computed in the graph (here mul(const, 1); a constexpr op's output alike) reaches the conv
    through the linear's reshape, which the evaluator takes as a view: the computed float64 array is dropped once
    the conv has read it, not kept to the end."""
    rng = np.random.default_rng(5)
    ws = [(rng.standard_normal((D, D)) / 16).astype(np.float16) for _ in range(LAYERS)]
    g = Graph()
    h = g.input("x", (1, D, 1, 4))
    for i, w in enumerate(ws):
        h = ops.add(h, ops.linear(h, ops.mul(g.weight(f"c{i}", w), 1.0)))
    g.output("y", h)
    x = np.random.default_rng(1).standard_normal((1, D, 1, 4))
    tracemalloc.start()
    out = evaluate(g, {"x": x})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    np.testing.assert_allclose(out["y"][0, :, 0, :], _numpy(ws, x)[-1], rtol=1e-12)
    assert peak < 4 * D * D * 8, f"peak {peak} bytes: computed conv weights held past their reader"
