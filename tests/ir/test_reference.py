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
