"""Blockwise int4/int8: the constexpr_blockwise_shift_scale layout, error <= scale/2, exact op arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from orion.errors import QuantizationError
from orion.quant import BlockwiseQuantized, quantize_blockwise

from quant_helpers import coremltools_module


def _weight(shape=(256, 1024), seed=0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(shape) * 0.02
    w[:, 40:48] *= 30  # an outlier block of inputs: only its own block's scale grows
    return w.astype(np.float32)


def _half_ulp(x: np.ndarray) -> np.ndarray:
    x16 = np.abs(x.astype(np.float16))
    return (np.nextafter(x16, np.float16(np.inf)).astype(np.float64) - x16) / 2


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_layout_and_error_within_half_a_step(bits, symmetric):
    w = _weight()
    q = quantize_blockwise(w, bits, block_size=32, symmetric=symmetric)
    kind = ("int" if symmetric else "uint") + str(bits)
    assert q.op == "constexpr_blockwise_shift_scale" and q.data.dtype == kind and q.shape == (256, 1024)
    assert q.scale.dtype == np.float16 and q.scale.shape == (256, 32) and q.block_sizes == (1, 32)
    if symmetric:
        top = (1 << (bits - 1)) - 1
        assert q.offset is None and np.abs(q.data.unpack()).max() == top
    else:
        assert q.offset.dtype == kind and q.offset.shape == (256, 32)
    y = q.dequantize()
    assert y.dtype == np.float16
    scale = np.repeat(q.scale.astype(np.float64), 32, axis=1)
    assert (np.abs(y - w.astype(np.float16).astype(np.float64)) <= scale / 2 + _half_ulp(y)).all()
    assert q.scale[0, 1] > 10 * q.scale[0, 0]  # block 1 holds the outliers, block 0 does not


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("symmetric", [True, False])
def test_dequantize_bit_equal_to_coremltools_op(bits, symmetric):
    ops = coremltools_module("coremltools.converters.mil.mil.ops.defs.iOS18.compression")
    q = quantize_blockwise(_weight(seed=1), bits, block_size=64, symmetric=symmetric)
    off = None if q.offset is None else q.offset.unpack()
    ct = ops.constexpr_blockwise_shift_scale.decompress(q.data.unpack(), q.scale, off)
    assert ct.dtype == np.float16
    assert np.array_equal(q.dequantize().view(np.uint16), ct.view(np.uint16))


def test_dequantize_is_the_exactly_rounded_product():
    q = quantize_blockwise(_weight(seed=2), 4, block_size=16, symmetric=False)
    rep = lambda a: np.repeat(a.astype(np.float64), 16, axis=1)  # noqa: E731
    exact = rep(q.scale) * (q.data.unpack().astype(np.float64) - rep(q.offset.unpack()))
    assert np.array_equal(q.dequantize().view(np.uint16), exact.astype(np.float16).view(np.uint16))


def test_bytes_at_most_030_of_fp16_at_4_bits():
    w = _weight()
    for symmetric in (True, False):
        q = quantize_blockwise(w, 4, block_size=32, symmetric=symmetric)
        expect = w.size // 2 + 256 * 32 * 2 + (0 if symmetric else 256 * 32 // 2)
        assert q.nbytes == expect and q.nbytes <= 0.30 * w.size * 2
        assert set(q.operands()) == ({"data", "scale"} if symmetric else {"data", "scale", "offset"})


def test_deterministic_and_fp16_fp32_agree():
    w = _weight(seed=3)
    a, b = quantize_blockwise(w), quantize_blockwise(w.astype(np.float16))
    assert np.array_equal(a.data.payload, b.data.payload) and np.array_equal(a.scale, b.scale)


def test_conv_shaped_weight_and_expand_rank():
    w = _weight((16, 64))
    q = quantize_blockwise(w, block_size=16)
    c = q.expand_rank(4)
    assert c.shape == (16, 64, 1, 1) and c.scale.shape == (16, 4, 1, 1) and c.block_sizes == (1, 16, 1, 1)
    assert np.array_equal(c.dequantize().reshape(16, 64), q.dequantize())
    direct = quantize_blockwise(w.reshape(16, 64, 1, 1), block_size=16, symmetric=False)
    assert direct.scale.shape == (16, 4, 1, 1) and direct.offset.shape == (16, 4, 1, 1)


@pytest.mark.parametrize("kwargs,match", [
    (dict(bits=3), "bits must be 4 or 8"),
    (dict(bits=6), "bits must be 4 or 8"),
    (dict(block_size=48), "block_size 48 does not divide the dimension 64"),
    (dict(block_size=-16), "positive int"),
])
def test_bad_parameters_raise_quantization_error(kwargs, match):
    with pytest.raises(QuantizationError, match=match):
        quantize_blockwise(_weight((8, 64)), **kwargs)


def test_bad_weights_raise_quantization_error():
    with pytest.raises(QuantizationError, match="float16, float32 or float64"):
        quantize_blockwise(np.ones((4, 32), np.uint8))
    w = _weight((4, 32))
    w[0, 0] = -np.inf
    with pytest.raises(QuantizationError, match="non-finite"):
        quantize_blockwise(w)


def test_dataclass_checks_operand_layout():
    q = quantize_blockwise(_weight((8, 64)), block_size=16, symmetric=False)
    with pytest.raises(QuantizationError, match="scale must be fp16"):
        BlockwiseQuantized(q.data, np.ones((8, 3), np.float16), q.offset)  # 3 does not divide 64
    with pytest.raises(QuantizationError, match="offset must be uint4"):
        BlockwiseQuantized(q.data, q.scale, q.offset.reshaped((4, 8)))
