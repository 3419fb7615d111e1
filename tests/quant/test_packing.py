"""Sub-byte packing is byte-identical to MILBlob v2 as coremltools writes and reads it, both ways."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from orion.errors import QuantizationError
from orion.quant.packing import BLOB_DTYPE_CODES, PackedInts, pack_bits, packed_size, unpack_bits

from quant_helpers import coremltools_module, one_blob_file

WIDTHS = [(b, False) for b in (1, 2, 3, 4, 6, 8)] + [(4, True), (8, True)]
SIZES = [1, 7, 8, 9, 24, 1003]


def _values(bits, signed, n, seed=0):
    rng = np.random.default_rng(seed + 31 * bits + n)
    if signed:
        return rng.integers(-(1 << (bits - 1)), 1 << (bits - 1), n).astype(np.int8)
    return rng.integers(0, 1 << bits, n).astype(np.uint8)


def test_documented_example_uint4():
    # LSB-first, as coremltools writes it: uint4 [1, 2, 3] -> bytes 21 03, 4 padding bits
    p = PackedInts.pack(np.array([1, 2, 3], np.uint8), 4)
    assert p.payload.tobytes() == b"\x21\x03" and p.padding_bits == 4 and p.dtype == "uint4"


def test_int4_is_twos_complement_lsb_first():
    assert pack_bits(np.array([-1, 2, -8, 7], np.int8), 4, signed=True).tobytes() == b"\x2f\x78"


@pytest.mark.parametrize("bits,signed", WIDTHS)
@pytest.mark.parametrize("n", SIZES)
def test_round_trip(bits, signed, n):
    v = _values(bits, signed, n)
    p = pack_bits(v, bits, signed)
    assert p.dtype == np.uint8 and p.size == packed_size(n, bits) == -(-n * bits // 8)
    assert np.array_equal(unpack_bits(p, bits, n, signed), v)


@pytest.mark.parametrize("bits,signed", WIDTHS)
def test_payload_equals_coremltools_writer(tmp_path, bits, signed):
    ms = coremltools_module("coremltools.libmilstoragepython")
    for n in SIZES:
        v = _values(bits, signed, n)
        path = str(tmp_path / f"ct_{bits}_{signed}_{n}.bin")
        w = ms._BlobStorageWriter(path)
        name = PackedInts.pack(v, bits, signed).dtype
        off = getattr(w, f"write_{name}_data")(v)
        del w
        data = (tmp_path / f"ct_{bits}_{signed}_{n}.bin").read_bytes()
        code, size, _, padding = struct.unpack_from("<IQQQ", data, off + 4)
        ours = PackedInts.pack(v, bits, signed)
        assert code == ours.blob_dtype_code == BLOB_DTYPE_CODES[name]
        assert size == ours.nbytes and padding == ours.padding_bits
        assert data[off + 64:off + 64 + size] == ours.payload.tobytes()


@pytest.mark.parametrize("bits,signed", WIDTHS)
def test_coremltools_reader_reads_our_payload(tmp_path, bits, signed):
    ms = coremltools_module("coremltools.libmilstoragepython")
    for n in SIZES:
        v = _values(bits, signed, n, seed=5)
        ours = PackedInts.pack(v, bits, signed)
        path = tmp_path / f"ours_{bits}_{signed}_{n}.bin"
        path.write_bytes(one_blob_file(ours.blob_dtype_code, ours.payload, ours.padding_bits))
        got = getattr(ms._BlobStorageReader(str(path)), f"read_{ours.dtype}_data")(64)
        assert np.array_equal(np.asarray(got).astype(np.int16), v.astype(np.int16))


@pytest.mark.parametrize("bits,signed", WIDTHS)
def test_matches_coremltools_optimize_packing(bits, signed):
    utils = coremltools_module("coremltools.optimize._utils")
    v = _values(bits, signed, 1003, seed=9)
    ct = utils.pack_elements_into_bits(v, bits)
    assert np.array_equal(pack_bits(v, bits, signed), ct)
    assert np.array_equal(unpack_bits(ct, bits, v.size, signed),
                          utils.restore_elements_from_packed_bits(ct, bits, v.size, signed))


def test_packed_ints_keeps_shape_and_reshapes():
    v = np.arange(24, dtype=np.uint8).reshape(4, 6) % 8
    p = PackedInts.pack(v, 3)
    assert p.shape == (4, 6) and np.array_equal(p.unpack(), v)
    assert p.reshaped((4, 6, 1, 1)).unpack().shape == (4, 6, 1, 1)
    with pytest.raises(QuantizationError, match="sizes differ"):
        p.reshaped((5, 6))


@pytest.mark.parametrize("bits,signed", [(5, False), (0, False), (3, True), (6, True), (16, False), (4.0, False)])
def test_widths_milblob_lacks_are_refused(bits, signed):
    with pytest.raises(QuantizationError, match="bits in"):
        pack_bits(np.zeros(4, np.uint8), bits, signed)


def test_out_of_range_and_non_integer_values_are_refused():
    with pytest.raises(QuantizationError, match=r"outside \[0, 15\] of uint4"):
        pack_bits(np.array([3, 16]), 4)
    with pytest.raises(QuantizationError, match=r"outside \[-8, 7\] of int4"):
        pack_bits(np.array([-9, 0]), 4, signed=True)
    with pytest.raises(QuantizationError, match="integer values"):
        pack_bits(np.array([1.0, 2.0]), 4)


def test_wrong_payload_size_is_refused():
    with pytest.raises(QuantizationError, match="take 2 bytes, got 3"):
        unpack_bits(np.zeros(3, np.uint8), 4, 3)
    with pytest.raises(QuantizationError, match="1-D uint8"):
        unpack_bits(np.zeros(2, np.int8), 4, 3)


@pytest.mark.parametrize("signed", [True, False])
def test_eight_bit_unpack_is_a_read_only_view_of_the_payload(signed):
    """8-bit values unpack to the payload itself (no copy a decode), read-only: a caller cannot change the weight."""
    p = PackedInts.pack(np.arange(-5, 5) if signed else np.arange(10), 8, signed=signed)
    v = p.unpack()
    assert v.dtype == (np.int8 if signed else np.uint8) and np.shares_memory(v, p.payload)
    with pytest.raises(ValueError):
        v[0] = 1
