"""k-means palettization: the iOS18 constexpr_lut_to_dense layout, quality, determinism, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from orion.errors import QuantizationError
from orion.quant import LutQuantized, PackedInts, palettize

from kernel_helpers import each_isa_and_threads
from quant_helpers import coremltools_module


def _gauss(shape=(256, 1024), seed=0, dtype=np.float16):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.02).astype(dtype)


def _uniform_mse(w: np.ndarray, bits: int) -> float:
    # min-max uniform quantization with 2**bits levels, the baseline the LUT must not lose to
    x = w.astype(np.float64)
    lo, hi = x.min(), x.max()
    step = (hi - lo) / ((1 << bits) - 1)
    return float(np.mean((np.rint((x - lo) / step) * step + lo - x) ** 2))


def _mse(q, w) -> float:
    return float(np.mean((q.dequantize().astype(np.float64) - w.astype(np.float64)) ** 2))


@pytest.mark.parametrize("bits", [4, 6])
@pytest.mark.parametrize("group_size", [None, 16])
def test_layout(bits, group_size):
    w = _gauss()
    q = palettize(w, bits, group_size=group_size)
    groups = 1 if group_size is None else 256 // group_size
    assert q.op == "constexpr_lut_to_dense" and q.shape == (256, 1024) and q.bits == bits
    assert q.indices.dtype == f"uint{bits}" and q.indices.unpack().max() < 1 << bits
    assert q.lut.dtype == np.float16 and q.lut.shape == (groups, 1, 1 << bits, 1)
    assert q.group_size == (256 if group_size is None else group_size)
    tables = q.lut.reshape(groups, -1)
    assert (np.diff(tables.astype(np.float64), axis=1) >= 0).all()  # ascending tables
    assert q.nbytes == 256 * 1024 * bits // 8 + groups * (1 << bits) * 2
    ops = q.operands()
    assert ops["indices"][:2] == (f"uint{bits}", (256, 1024)) and ops["lut"][:2] == ("fp16", q.lut.shape)
    assert ops["indices"][2].size == 256 * 1024 * bits // 8


@pytest.mark.parametrize("group_size", [None, 16])
def test_dequantize_bit_equal_to_coremltools_op(group_size):
    ops = coremltools_module("coremltools.converters.mil.mil.ops.defs.iOS18.compression")
    q = palettize(_gauss(seed=1), 4, group_size=group_size)
    ct = ops.constexpr_lut_to_dense.decompress(q.indices.unpack(), q.lut, None)
    assert ct.dtype == np.float16 and ct.shape == q.shape
    assert np.array_equal(q.dequantize().view(np.uint16), ct.view(np.uint16))


def test_every_weight_gets_its_nearest_table_entry():
    w = _gauss((32, 256), seed=2)
    q = palettize(w, 4, group_size=8)
    tables = q.lut.reshape(4, 16).astype(np.float64)
    d = np.abs(w.astype(np.float64).reshape(4, 8 * 256, 1) - tables[:, None, :])
    best = d.min(axis=2).reshape(32, 256)
    assert np.array_equal(np.abs(q.dequantize().astype(np.float64) - w), best)


@pytest.mark.parametrize("bits", [2, 3, 4, 6])
def test_no_worse_than_uniform_quantization_on_gaussian_data(bits):
    w = _gauss(seed=3)
    assert _mse(palettize(w, bits), w) <= _uniform_mse(w, bits)
    q = palettize(w, bits, group_size=32)
    per_group = np.mean([_uniform_mse(g, bits) for g in w.reshape(8, -1)])
    assert _mse(q, w) <= per_group


def test_more_bits_less_error_and_grouping_follows_channel_scales():
    w = _gauss(seed=4).astype(np.float32)
    w[:128] *= 10  # two channel populations with different ranges
    e4, e6 = _mse(palettize(w, 4), w), _mse(palettize(w, 6), w)
    assert e6 < e4 / 4
    small = slice(128, 256)
    per_tensor = palettize(w, 4).dequantize()[small].astype(np.float64)
    grouped = palettize(w, 4, group_size=128).dequantize()[small].astype(np.float64)
    assert np.mean((grouped - w[small]) ** 2) < np.mean((per_tensor - w[small]) ** 2) / 4


def test_deterministic_with_a_seed():
    w = _gauss(seed=5)
    a, b = palettize(w, 4, group_size=64, seed=7), palettize(w, 4, group_size=64, seed=7)
    assert np.array_equal(a.lut, b.lut) and np.array_equal(a.indices.payload, b.indices.payload)
    c = palettize(w, 4, group_size=64, seed=[7, 1])
    assert np.array_equal(c.lut, palettize(w, 4, group_size=64, seed=[7, 1]).lut)
    # fp32 input is rounded to fp16 first: same result as the fp16 copy
    d = palettize(w.astype(np.float32), 4, group_size=64, seed=7)
    assert np.array_equal(a.lut, d.lut) and np.array_equal(a.indices.payload, d.indices.payload)


def test_few_distinct_values_are_reproduced_exactly():
    w = np.tile(np.array([-0.5, 0.0, 0.25], np.float16), (4, 5))
    q = palettize(w, 4)
    assert np.array_equal(q.dequantize(), w)


def test_bytes_at_most_030_of_fp16_at_4_bits():
    w = _gauss()
    for group_size in (None, 16, 1):
        assert palettize(w, 4, group_size=group_size).nbytes <= 0.30 * w.size * 2


def test_expand_rank_to_conv_layout():
    q = palettize(_gauss((32, 64)), 4, group_size=8)
    c = q.expand_rank(4)
    assert c.shape == (32, 64, 1, 1) and c.lut.shape == (4, 1, 1, 1, 16, 1)
    assert np.array_equal(c.dequantize().reshape(32, 64), q.dequantize())


@pytest.mark.parametrize("kwargs,match", [
    (dict(bits=5), "bits in"),
    (dict(bits=0), "bits in"),
    (dict(bits=4, group_size=24), "group_size 24 does not divide the dimension 64"),
    (dict(bits=4, group_size=0), "positive int"),
    (dict(bits=4, group_size=2.0), "positive int"),
    (dict(bits=4, max_iter=-1), "max_iter"),
    (dict(bits=4, seed=-3), "seed"),
])
def test_bad_parameters_raise_quantization_error(kwargs, match):
    with pytest.raises(QuantizationError, match=match):
        palettize(_gauss((64, 32)), **kwargs)


def test_bad_weights_raise_quantization_error():
    with pytest.raises(QuantizationError, match="float16, float32 or float64"):
        palettize(np.ones((4, 4), np.int32), 4)
    w = _gauss((4, 4)).astype(np.float32)
    w[2, 1] = np.nan
    with pytest.raises(QuantizationError, match=r"non-finite value at index \[2, 1\]"):
        palettize(w, 4)


def test_dataclass_checks_operand_layout():
    q = palettize(_gauss((8, 16)), 2)
    with pytest.raises(QuantizationError, match="lut must be fp16"):
        LutQuantized(q.indices, q.lut.reshape(1, 4, 1))
    with pytest.raises(QuantizationError, match="lut must be fp16"):
        LutQuantized(q.indices, np.zeros((3, 1, 4, 1), np.float16))  # 3 groups do not divide 8 channels
    with pytest.raises(QuantizationError, match="unsigned"):
        LutQuantized(PackedInts.pack(np.zeros((8, 16), np.int8), 4, signed=True), q.lut)


@pytest.mark.parametrize("bits", [1, 2, 4, 6, 8])
def test_ios16_form_of_a_per_tensor_lut(bits):
    ops = coremltools_module("coremltools.converters.mil.mil.ops.defs.iOS16.constexpr_ops")
    q = palettize(_gauss((16, 40), seed=bits), bits)
    o = q.ios16_operands()
    assert o["indices"][:2] == ("uint8", (16 * 40 * bits // 8,)) and np.array_equal(o["indices"][2], q.indices.payload)
    assert o["shape"][0] == "uint32" and o["shape"][2].view(np.uint32).tolist() == [16, 40]
    lut = o["lut"][2].view(np.float16)
    ct = ops.constexpr_lut_to_dense.decompress(lut, o["indices"][2], np.array([16, 40], np.uint32))
    assert np.array_equal(ct.view(np.uint16), q.dequantize().view(np.uint16))


def test_ios16_form_refuses_grouped_tables_and_3_bits():
    with pytest.raises(QuantizationError, match="use the iOS18 form"):
        palettize(_gauss((16, 40)), 4, group_size=8).ios16_operands()
    with pytest.raises(QuantizationError, match="use the iOS18 form"):
        palettize(_gauss((16, 40)), 3).ios16_operands()


@pytest.mark.parametrize("bits", [1, 2, 3, 4, 6, 8])
@pytest.mark.parametrize("shape,groups", [((64, 48), 4), ((16, 37, 1, 1), 16), ((5, 3), 1), ((33, 64), 33)])
def test_dequantize_is_the_table_gather_on_every_isa(bits, shape, groups):
    """dequantize (the native lookup: 4-bit rows of whole 16-code runs through each ISA's decode_lut4, other widths
    and odd rows code by code, codes crossing bytes) gives lut[row's table][code] for every element."""
    rng = np.random.default_rng(bits)
    codes = rng.integers(0, 1 << bits, shape)
    tables = rng.standard_normal((groups, 1 << bits)).astype(np.float16)
    lut = tables.reshape((groups,) + (1,) * (len(shape) - 1) + (1 << bits, 1))
    q = LutQuantized(PackedInts.pack(codes, bits), lut)
    want = tables[np.arange(shape[0])[:, None] // (shape[0] // groups), codes.reshape(shape[0], -1)].reshape(shape)
    for isa, threads in each_isa_and_threads():
        got = q.dequantize()
        assert got.dtype == np.float16 and got.shape == shape
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16), err_msg=f"{isa} {threads}")


def test_a_payload_of_the_wrong_size_is_a_quantization_error():
    q = LutQuantized(PackedInts(np.zeros(7, np.uint8), (4, 4), 4, False), np.zeros((1, 1, 16, 1), np.float16))
    with pytest.raises(QuantizationError, match="take 8 bytes"):
        q.dequantize()


def test_native_lookup_refuses_sizes_that_do_not_match():
    from orion.native.convert import lut_to_fp16
    tables = np.zeros((2, 16), np.float16)
    with pytest.raises(ValueError, match="packed must hold"):
        lut_to_fp16(np.zeros(7, np.uint8), 4, 4, 4, tables, 2)
    with pytest.raises(ValueError, match="rows_per_table must divide"):
        lut_to_fp16(np.zeros(8, np.uint8), 4, 4, 4, tables, 3)
    with pytest.raises(ValueError, match="lut must hold"):
        lut_to_fp16(np.zeros(8, np.uint8), 4, 4, 4, tables, 1)
