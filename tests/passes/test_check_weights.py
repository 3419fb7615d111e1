"""check_weights: NaN/inf/out-of-fp16-range weights rejected (default) or warned about (C37)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from compiler_helpers import apply_passes
from orion.errors import InputError
from orion.ir import Graph, ops
from orion.compiler.passes import CompileWarning


def _g(value):
    g = Graph()
    x = g.input("x", (1, 4, 1, 16))
    g.output("y", ops.mul(x, g.weight("gain", np.asarray(value, np.float32).reshape(1, 4, 1, 1))))
    return g


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 70000.0, 65520.0, -65520.0])
def test_bad_weights_rejected_with_name_and_index(bad):
    with pytest.raises(InputError) as e:
        apply_passes(_g([1.0, 2.0, bad, 3.0]), "check_weights")
    msg = str(e.value)
    assert "'gain'" in msg and "index [0, 2, 0, 0]" in msg and "non_finite='warn'" in msg
    assert e.value.constraint == "C37"


def test_warn_mode():
    with pytest.warns(CompileWarning, match="gain"):
        apply_passes(_g([1.0, np.nan, 1.0, 1.0]), "check_weights", non_finite="warn")


def test_edge_of_fp16_range_is_fine():
    """fp16's largest magnitudes (65504, and 65519, which rounds to it) and a subnormal pass in both modes
    without a warning, and the weight keeps its values (65520 and beyond round to inf: rejected above)."""
    edge = [65504.0, -65504.0, 65519.0, 6e-8]
    for mode in ("error", "warn"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")                    # any warning fails the test
            after, _ = apply_passes(_g(edge), "check_weights", non_finite=mode)
        gain = next(n for n in after.nodes if n.op == "const" and n.attrs.get("weight") == "gain")
        assert np.array_equal(np.asarray(gain.attrs["value"]).ravel(), np.float32(edge))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_fp16_weights_checked_by_their_bits_in_every_chunk_and_layout(bad):
    """fp16 weights (every one a quantized model's graphs hold) are checked by a bit test a chunk at a time: a
    NaN or inf anywhere - the last chunk, a transposed or strided view - is found; +-65504 and -0 pass."""
    from orion.compiler.passes.check_weights import finite_fp16, fits_fp16
    w = np.random.default_rng(0).standard_normal((300, 70)).astype(np.float16)
    w[0, :3] = [65504, -65504, -0.0]
    assert fits_fp16(w) and finite_fp16(w, chunk=64) and fits_fp16(w.T) and fits_fp16(w[:, ::3])
    for at in [(0, 0), (299, 69), (150, 33)]:
        b = w.copy()
        b[at] = bad
        assert not fits_fp16(b) and not finite_fp16(b, chunk=64) and not fits_fp16(b.T)
    b = w.copy()
    b[7, 9] = bad
    assert not fits_fp16(b[:, ::3]) and fits_fp16(b[:, 1::3])   # column 9 is in the first view only
    with pytest.raises(InputError, match="'gain'"):
        g = Graph()
        x = g.input("x", (1, 4, 1, 16))
        g.output("y", ops.mul(x, g.weight("gain", np.asarray([1, 2, bad, 3], np.float16).reshape(1, 4, 1, 1))))
        apply_passes(g, "check_weights")
