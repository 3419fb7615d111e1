"""Per-channel int8: the constexpr_affine_dequantize layout, error <= scale/2, exact op arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from orion.errors import QuantizationError
from orion.quant import AffineQuantized, PackedInts, quantize_int8

from quant_helpers import coremltools_module


def _weight(shape=(256, 1024), seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape) * 0.02
    w[3] *= 40  # an outlier channel: its scale must not leak into the others
    w[5] = np.abs(w[5])  # an all-positive channel (affine zero point 0)
    return w.astype(np.float32)


def _half_ulp(x: np.ndarray) -> np.ndarray:
    x16 = np.abs(x.astype(np.float16))
    return (np.nextafter(x16, np.float16(np.inf)).astype(np.float64) - x16) / 2


@pytest.mark.parametrize("symmetric", [True, False])
def test_error_within_half_a_step_per_channel(symmetric):
    w = _weight()
    q = quantize_int8(w, symmetric=symmetric)
    w16 = w.astype(np.float16).astype(np.float64)
    y = q.dequantize()
    assert y.dtype == np.float16 and y.shape == w.shape
    # half a quantization step, plus the one fp16 rounding of the product
    bound = q.scale.astype(np.float64)[:, None] / 2 + _half_ulp(y)
    assert (np.abs(y - w16) <= bound).all()
    assert q.scale[3] > 20 * np.median(q.scale)  # per channel, not per tensor


def test_symmetric_layout():
    q = quantize_int8(_weight())
    d = q.quantized_data.unpack()
    assert q.op == "constexpr_affine_dequantize" and q.axis == 0
    assert q.quantized_data.dtype == "int8" and d.dtype == np.int8 and d.shape == (256, 1024)
    assert d.min() >= -127 and d.max() <= 127 and (np.abs(d).max(axis=1) == 127).all()
    assert q.scale.dtype == np.float16 and q.scale.shape == (256,)
    assert q.zero_point.dtype == np.int8 and q.zero_point.shape == (256,) and not q.zero_point.any()


def test_affine_layout_uses_the_full_uint8_range():
    q = quantize_int8(_weight(), symmetric=False)
    d = q.quantized_data.unpack()
    assert q.quantized_data.dtype == "uint8" and q.zero_point.dtype == np.uint8 and q.zero_point.shape == (256,)
    assert q.zero_point[5] == 0  # channel without negatives
    assert (d.max(axis=1) >= 254).all() or (d.min(axis=1) <= 1).all()


@pytest.mark.parametrize("symmetric", [True, False])
def test_dequantize_is_the_exactly_rounded_product(symmetric):
    # the documented reference: fp16(scale * (q - zp)) with one round-to-nearest-even
    q = quantize_int8(_weight(seed=1), symmetric=symmetric)
    exact = q.scale.astype(np.float64)[:, None] * (q.quantized_data.unpack().astype(np.float64)
                                                     - q.zero_point.astype(np.float64)[:, None])
    assert np.array_equal(q.dequantize().view(np.uint16), exact.astype(np.float16).view(np.uint16))


@pytest.mark.parametrize("symmetric", [True, False])
def test_dequantize_bit_equal_to_coremltools_op(symmetric):
    ops = coremltools_module("coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops")
    q = quantize_int8(_weight(seed=2), symmetric=symmetric)
    ct = ops.constexpr_affine_dequantize.decompress(q.quantized_data.unpack(), q.zero_point, q.scale, q.axis)
    assert ct.dtype == np.float16
    assert np.array_equal(q.dequantize().view(np.uint16), ct.view(np.uint16))


def test_bytes_at_most_055_of_fp16():
    w = _weight()
    for symmetric in (True, False):
        q = quantize_int8(w, symmetric=symmetric)
        assert q.nbytes == w.size + 256 * 2 + 256
        assert q.nbytes <= 0.55 * w.size * 2
        ops = q.operands()
        assert {k: (v[0], v[1]) for k, v in ops.items()} == {
            "quantized_data": ("int8" if symmetric else "uint8", (256, 1024)),
            "scale": ("fp16", (256,)), "zero_point": ("int8" if symmetric else "uint8", (256,))}


def test_fp32_and_fp16_inputs_give_the_same_arrays():
    w = _weight(seed=3)
    a, b = quantize_int8(w), quantize_int8(w.astype(np.float16))
    assert np.array_equal(a.quantized_data.payload, b.quantized_data.payload)
    assert np.array_equal(a.scale, b.scale)


def test_scale_is_rounded_up_so_nothing_clips():
    # max|w| / 127 rounds down in fp16 here; the scale must be bumped so 127 * scale still covers w
    cands = np.arange(0.05, 0.2, 1e-4).astype(np.float16)
    m = next(c for c in cands if float(np.float16(float(c) / 127)) * 127 < float(c))
    w = np.array([[float(m), -0.05, 0.0, 0.01]], np.float16)
    q = quantize_int8(w)
    assert float(q.scale[0]) * 127 >= float(m)
    assert abs(float(q.dequantize()[0, 0]) - float(m)) <= float(q.scale[0]) / 2 + 1e-4


def test_zero_channel_and_tiny_channel():
    w = np.zeros((3, 8), np.float16)
    w[1] = np.float16(6e-8)  # fp16 subnormal territory
    w[2, 0] = 1.0
    for symmetric in (True, False):
        q = quantize_int8(w, symmetric=symmetric)
        y = q.dequantize().astype(np.float64)
        assert q.scale[0] == 1.0 and not y[0].any()  # an all-zero channel gets scale 1 and stays zero
        assert 0 < q.scale[1] <= 6e-8 and y[1, 0] == np.float64(np.float16(6e-8))
        assert abs(y[2, 0] - 1.0) <= float(q.scale[2]) / 2


def test_expand_rank_to_conv_layout():
    q = quantize_int8(_weight((16, 32)))
    c = q.expand_rank(4)
    assert c.shape == (16, 32, 1, 1) and c.scale.shape == (16,)
    assert np.array_equal(c.dequantize().reshape(16, 32), q.dequantize())


@pytest.mark.parametrize("w,match", [
    (np.ones((4, 4), np.int8), "float16, float32 or float64"),
    (np.ones(8, np.float32), "rank >= 2"),
    (np.ones((0, 4), np.float32), "rank >= 2"),
    (np.array([[1.0, np.nan]], np.float32), r"non-finite value at index \[0, 1\]"),
    (np.array([[np.inf, 1.0]], np.float16), "non-finite"),
    (np.array([[1e6, 1.0]], np.float32), "beyond the fp16 range"),
    ([[1.0, 2.0]], "numpy array"),
])
def test_bad_input_raises_quantization_error(w, match):
    with pytest.raises(QuantizationError, match=match) as e:
        quantize_int8(w)
    assert isinstance(e.value, ValueError)


def test_dataclass_checks_operand_layout():
    q = quantize_int8(_weight((8, 16)))
    with pytest.raises(QuantizationError, match="scale must be fp16"):
        AffineQuantized(q.quantized_data, q.scale.astype(np.float32), q.zero_point)
    with pytest.raises(QuantizationError, match="zero_point must be int8"):
        AffineQuantized(q.quantized_data, q.scale, q.zero_point.astype(np.uint8))
    with pytest.raises(QuantizationError, match="int8 or uint8"):
        AffineQuantized(PackedInts.pack(np.zeros((8, 16), np.uint8), 4), q.scale, q.zero_point)


def _numpy_symmetric(w16):
    """quantize_int8's symmetric arithmetic in numpy: float32 quotient, rint (ties to even), clip."""
    rows = w16.reshape(w16.shape[0], -1).astype(np.float32)
    from orion.quant.common import covering_scale
    scale = covering_scale(np.abs(rows).max(axis=1), 127)
    return scale, np.clip(np.rint(rows / scale[:, None].astype(np.float32)), -127, 127).astype(np.int8)


@pytest.mark.parametrize("threads", [1, 2])
def test_native_symmetric_codes_are_numpys_with_ties_zeros_and_edges(threads):
    """The native row quantizer (orion.native.convert.fp16_to_codes / row_absmax, used by quantize_int8 and the CPU
    classifier) gives numpy's float32 rint-and-clip codes: quotients exactly at k + 1/2 round to even, -0 and 0,
    the row's extreme at +-127, subnormal rows, rows of zeros (scale 1)."""
    from orion import _native
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((64, 300)) * np.exp2(rng.integers(-20, 4, (64, 1)))).astype(np.float16)
    w[0, :8] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.0, -0.0]) / 64   # ties once the scale is 1/64
    w[0, 8] = 127 / 64                                                          # max |w| -> scale exactly 1/64
    w[0, 9:] = 0
    w[1] = 0
    w[2] = np.float16(6e-8) * rng.integers(-3, 4, 300)                         # subnormals
    _native.set_num_threads(threads)
    try:
        q = quantize_int8(w)
    finally:
        _native.set_num_threads(0)
    scale, codes = _numpy_symmetric(w)
    assert q.scale[0] == np.float16(1 / 64) and q.scale[1] == 1
    np.testing.assert_array_equal(q.scale.view(np.uint16), scale.view(np.uint16))
    np.testing.assert_array_equal(q.quantized_data.unpack().reshape(64, 300), codes)
    np.testing.assert_array_equal(codes[0, :6], [0, 2, 2, 0, -2, -2])


def test_row_absmax_propagates_nan():
    from orion.native.convert import row_absmax
    w = np.ones((3, 40), np.float16)
    w[1, 17] = np.nan
    w[2, 3] = -5
    m = row_absmax(w)
    assert m[0] == 1 and np.isnan(m[1]) and m[2] == 5
