"""limits: C25 contraction splitting and C22 output chunking (automatic fixes), checked exactly in
float64 and on the simulator."""

from __future__ import annotations

import numpy as np
import pytest

from compiler_helpers import assert_fp16_close, ops_of, reference_program, run_sim, rng  # noqa: F401 (fixture)
from orion.compiler import lower
from orion.errors import CompileError
from orion.ir import Graph, evaluate, ops


def test_c25_split_input_channels(rng):
    g = Graph()
    x = g.input("x", (1, 200, 1, 128))
    g.output("y", ops.linear(x, rng.standard_normal((64, 200)) / 14))
    low = lower(g, conv_split_channels=64)                # small stand-in for 8,192
    assert ops_of(low.graph).count("conv") == 4 and ops_of(low.graph).count("slice_by_size") == 4
    a = rng.standard_normal((1, 200, 1, 128))
    np.testing.assert_allclose(reference_program(low, {"x": a})["y"], evaluate(g, {"x": a})["y"], rtol=1e-9)
    out = run_sim(g, {"x": a.astype(np.float16)}, conv_split_channels=64)["y"]
    assert_fp16_close(out, evaluate(g, {"x": a.astype(np.float16)})["y"])


def test_c25_real_threshold_text_only(rng):
    g = Graph()
    x = g.input("x", (1, 9000, 1, 16))
    g.output("y", ops.linear(x, rng.standard_normal((16, 9000)).astype(np.float32) / 96))
    low = lower(g)
    assert ops_of(low.graph).count("conv") == 2
    a = rng.standard_normal((1, 9000, 1, 16))                 # the two halves sum to the whole contraction
    np.testing.assert_allclose(reference_program(low, {"x": a})["y"], evaluate(g, {"x": a})["y"], rtol=1e-9)


@pytest.mark.parametrize("bias", [False, True])
def test_c22_returned_conv_is_chunked(rng, bias):
    g = Graph()
    x = g.input("x", (1, 32, 1, 64))
    b = rng.standard_normal(300) if bias else None
    g.output("logits", ops.linear(x, rng.standard_normal((300, 32)) / 6, b))
    low = lower(g, max_axis=128)                          # small stand-in for 65,536
    parts = low.io.outputs["logits"].parts
    assert len(parts) == 3 and low.io.outputs["logits"].concat_axis == 1
    assert all(p.shape[1] <= 128 for p in parts)
    a = rng.standard_normal((1, 32, 1, 64))
    np.testing.assert_allclose(reference_program(low, {"x": a})["logits"], evaluate(g, {"x": a})["logits"],
                               rtol=1e-9)


def test_c22_unfixable_axis_is_an_error():
    g = Graph()
    x = g.input("x", (1, 8, 1, 300))
    g.output("y", ops.softmax(ops.exp(x), axis=1))
    with pytest.raises(CompileError) as e:
        lower(g, max_axis=128)
    assert e.value.constraint == "C22"
