"""orion.native.convert: fp32 <-> fp16 arrays through the native converter give numpy's casts bit for bit, at
every size (tiny arrays take numpy's own cast), for C- and Fortran-ordered arrays, with overflow to inf and
subnormals; and the dequantizations built on it (quant.common.shift_scale) equal numpy's arithmetic."""

import numpy as np
import pytest

from kernel_helpers import each_isa_and_threads
from orion.native import convert
from orion.quant.common import shift_scale

RNG = np.random.default_rng(0)


def _hard_fp32(shape):
    """fp32 values around every fp16 edge: random magnitudes from 2^-30 to 2^17 (subnormals, overflow), ties."""
    x = (RNG.standard_normal(shape) * np.exp2(RNG.integers(-30, 18, shape))).astype(np.float32)
    flat = x.reshape(-1)
    flat[:4] = [65519.99, 65520.0, -65520.0, np.float32(2.0 ** -25)]     # below / at the rounding to inf; a tie
    return x


@pytest.mark.parametrize("shape", [(5,), (40, 50), (300, 77)])
def test_to_fp16_is_numpys_cast_bit_for_bit(shape):
    x = _hard_fp32(shape)
    with np.errstate(over="ignore"):
        ref = x.astype(np.float16)
    for arr in (x, np.asfortranarray(x), x.T):
        got = convert.to_fp16(arr)
        assert got.dtype == np.float16 and got.flags.c_contiguous and got.shape == arr.shape
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(got.view(np.uint16), arr.astype(np.float16).view(np.uint16))
    assert np.isinf(ref.reshape(-1)[1])                                  # the edge cases did reach overflow


def test_to_fp16_of_float64_goes_through_fp32_as_the_runtime_gets_it():
    x = _hard_fp32((100, 100)).astype(np.float64) * (1 + 2.0 ** -30)
    np.testing.assert_array_equal(convert.to_fp16(x).view(np.uint16),
                                  convert.to_fp16(x.astype(np.float32)).view(np.uint16))


@pytest.mark.parametrize("shape", [(7, 5), (128, 64)])
def test_to_fp32_widens_exactly(shape):
    h = RNG.standard_normal(shape).astype(np.float16)
    h.reshape(-1)[:3] = [np.float16(65504), np.float16(6e-8), np.float16(-0.0)]
    np.testing.assert_array_equal(convert.to_fp32(h).view(np.uint32), h.astype(np.float32).view(np.uint32))


def test_shift_scale_equals_numpys_arithmetic():
    q = RNG.integers(-127, 128, (256, 96)).astype(np.int8)
    scale = (RNG.random((256, 1)) * 2.0 ** RNG.integers(-14, 9, (256, 1))).astype(np.float16)
    offset = RNG.integers(-3, 4, (256, 1)).astype(np.int8)
    ref = ((q.astype(np.float32) - offset.astype(np.float32)) * scale.astype(np.float32))
    with np.errstate(over="ignore"):
        ref = ref.astype(np.float16)
    np.testing.assert_array_equal(shift_scale(q, scale, offset).view(np.uint16), ref.view(np.uint16))


def _numpy_shift_scale(q, scale, offset):
    """The ops' arithmetic in numpy, the grids repeated to q's shape: fp16(fp32(q - offset) * scale)."""
    def spread(v):
        for axis, (n, g) in enumerate(zip(q.shape, v.shape)):
            v = np.repeat(v, n // g, axis)
        return v.astype(np.float32)
    d = q.astype(np.float32) - (0 if offset is None else spread(offset))
    with np.errstate(over="ignore"):
        return (d * spread(scale)).astype(np.float16)


# (codes' shape, grid shape): per row (int8), blocks along the row (blockwise int4/int8, with trailing conv dims),
# blocks of rows too, a per-column grid (a transposed weight's), rows whose length is no multiple of 16, a grid
# along dim 2 after a dim of 6 (numpy's path) and after a unit dim (runs of a row: native)
GRIDS = [((256, 96), (256, 1)), ((64, 128, 1, 1), (64, 4, 1, 1)), ((48, 40), (12, 5)), ((24, 33), (1, 33)),
         ((5, 3, 7), (5, 1, 1)), ((17,), (17,)), ((8, 6, 32), (8, 1, 4)), ((16, 1, 64), (4, 1, 2))]


@pytest.mark.parametrize("shape,grid", GRIDS)
@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("with_offset", [True, False])
def test_shift_scale_of_every_grid_equals_numpys_arithmetic_on_every_isa(shape, grid, signed, with_offset):
    """quant.common.shift_scale (the int8 and blockwise dequantize): the native pass over row blocks x column runs
    (every ISA's decode_ss8 and its scalar tail) and numpy's path for other grids give the ops' bits; scales from
    subnormal to overflowing products (inf, as the op gives it)."""
    lo, hi = (-128, 128) if signed else (0, 256)
    q = RNG.integers(lo, hi, shape).astype(np.int8 if signed else np.uint8)
    scale = (RNG.random(grid) * 2.0 ** RNG.integers(-24, 10, grid)).astype(np.float16)
    offset = RNG.integers(lo // 2, hi // 2, grid).astype(q.dtype) if with_offset else None
    ref = _numpy_shift_scale(q, scale, offset)
    for isa, threads in each_isa_and_threads():
        got = shift_scale(q, scale, offset)
        assert got.shape == q.shape and got.dtype == np.float16
        np.testing.assert_array_equal(got.view(np.uint16), ref.view(np.uint16), err_msg=f"{isa} {threads}")


def test_shift_scale_broadcasts_a_lower_rank_grid_from_the_right():
    """A scale / offset of lower rank than the codes broadcasts as numpy would (leading dims of 1): a per-column
    scale [K] of codes [M, K], and an offset of another grid than the scale's (numpy's path)."""
    q = RNG.integers(-127, 128, (8, 32)).astype(np.int8)
    col = (RNG.random(32) + 0.5).astype(np.float16)
    want = _numpy_shift_scale(q, col.reshape(1, 32), None)
    np.testing.assert_array_equal(shift_scale(q, col, None).view(np.uint16), want.view(np.uint16))
    row = (RNG.random((8, 1)) + 0.5).astype(np.float16)
    off = RNG.integers(-3, 4, (1, 32)).astype(np.int8)
    want = _numpy_shift_scale(q, np.broadcast_to(row, (8, 32)), np.broadcast_to(off, (8, 32)))
    np.testing.assert_array_equal(shift_scale(q, row, off).view(np.uint16), want.view(np.uint16))


def test_codes_to_fp16_refuses_grids_that_do_not_divide_the_codes():
    q = np.zeros((6, 10), np.int8)
    with pytest.raises(ValueError, match="rows_per_block must divide"):
        convert.codes_to_fp16(q, np.ones(4, np.float32), None, 4, 1)
    with pytest.raises(ValueError, match="one value per block"):
        convert.codes_to_fp16(q, np.ones(5, np.float32), None, 2, 2)
    with pytest.raises(ValueError, match="int8 or uint8"):
        convert.codes_to_fp16(q.astype(np.int16), np.ones(6, np.float32), None, 1, 1)


def test_a_read_only_array_converts_in_place_of_a_copy():
    """A weight memory-mapped read-only from the weight cache (the CPU classifier's) takes the native path."""
    h = RNG.standard_normal((128, 64)).astype(np.float16)
    h.flags.writeable = False
    np.testing.assert_array_equal(convert.to_fp32(h).view(np.uint32), h.astype(np.float32).view(np.uint32))
    x = h.astype(np.float32)
    x.flags.writeable = False
    np.testing.assert_array_equal(convert.to_fp16(x).view(np.uint16), h.view(np.uint16))
