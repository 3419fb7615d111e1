"""MILBlob storage format v2 (layout: src/orion_native/blob/blob.h): writer bytes, reader validation, and
coremltools 9.0 as an independent oracle (its Linux wheel ships the MILBlob reader and writer)."""

from __future__ import annotations

import contextlib
import io
import os
import struct
import warnings

import numpy as np
import pytest

import orion
from orion import _native
from orion.native.blob import BlobFormatWarning, BlobRecord, list_blobs, read_blob, save_blob_file, write_blob_file

SENTINEL = 0xDEADBEEF
U64_MAX = 2**64 - 1
NUMPY_CODES = {np.float16: 1, np.float32: 2, np.uint8: 3, np.int8: 4, np.int16: 6, np.uint16: 7,
               np.int32: 14, np.uint32: 15}
# BlobDataType code -> bits per element.
BITS = {1: 16, 2: 32, 3: 8, 4: 8, 5: 16, 6: 16, 7: 16, 8: 4, 9: 1, 10: 2, 11: 4, 12: 3, 13: 6, 14: 32,
        15: 32, 16: 8, 17: 8}


# ---------------------------------------------------------------------------------------------
# Hand-built files: independent of the writer under test.

def header(count: int, version: int = 2, reserved=(0,) * 7) -> bytes:
    return struct.pack("<II7Q", count, version, *reserved)


def metadata(dtype: int, size: int, offset: int, padding: int = 0, sentinel: int = SENTINEL,
             reserved=(0,) * 4) -> bytes:
    return struct.pack("<IIQQQ4Q", sentinel, dtype, size, offset, padding, *reserved)


def pad64(b: bytes) -> bytes:
    return b + bytes(-len(b) % 64)


def spec_file(payloads: list[tuple], count: int | None = None) -> bytes:
    """Spec-exact file from (dtype_code, payload[, padding_bits]) tuples, built with struct."""
    out = header(len(payloads) if count is None else count)
    for i, (code, data, *padding) in enumerate(payloads):
        m = len(out)
        out += metadata(code, len(data), m + 64, *padding) + data
        if i + 1 < len(payloads):
            out = pad64(out)
    return out


def two_blob_file() -> bytes:
    """fp16[10] at 64 (payload 128..148), int8[5] at 192 (payload 256..261)."""
    return spec_file([(1, np.arange(10, dtype=np.float16).tobytes()), (4, bytes([1, 2, 3, 4, 5]))])


def pack_subbyte(values, bits: int) -> tuple[bytes, int]:
    """LSB-first packing: returns (bytes, unused bits in the last byte)."""
    acc = 0
    for i, v in enumerate(values):
        acc |= (int(v) & ((1 << bits) - 1)) << (i * bits)
    nbits = len(values) * bits
    return acc.to_bytes((nbits + 7) // 8, "little"), -nbits % 8


def read_both(data: bytes, offset: int, **kw):
    """_native.blob_read in default and strict mode: (default result, strict result or the error)."""
    loose = _native.blob_read(data, offset, **kw)
    try:
        strict = _native.blob_read(data, offset, strict=True, **kw)
    except orion.BlobFormatError as e:
        strict = e
    return loose, strict


# ---------------------------------------------------------------------------------------------
# Writer: worked examples byte for byte.

def test_worked_example_single_fp16():  # one [64, 64, 1, 1] tensor: an 8,320-byte file
    w = np.random.default_rng(0).standard_normal((64, 64, 1, 1)).astype(np.float16)
    data, offsets = write_blob_file([w])
    assert offsets == [64]
    assert len(data) == 8320
    assert data[0:4] == bytes.fromhex("01000000")
    assert data[4:8] == bytes.fromhex("02000000")
    assert data[8:64] == bytes(56)
    assert data[64:68] == bytes.fromhex("EFBEADDE")
    assert data[68:72] == bytes.fromhex("01000000")
    assert data[72:80] == bytes.fromhex("0020000000000000")
    assert data[80:88] == bytes.fromhex("8000000000000000")
    assert data[88:128] == bytes(40)
    assert data[128:] == w.tobytes()
    assert data == spec_file([(1, w.tobytes())])


def test_worked_example_two_fp16():  # two [40, 40]: metadata at 64 and 3,328
    a = np.full((40, 40), 1.5, np.float16)
    b = np.full((40, 40), -2.0, np.float16)
    data, offsets = write_blob_file([a, b])
    assert offsets == [64, 3328]
    assert struct.unpack_from("<I", data, 0)[0] == 2
    assert len(data) == 3392 + 3200
    assert struct.unpack_from("<IIQQ", data, 3328) == (SENTINEL, 1, 3200, 3392)
    assert data[128:3328] == a.tobytes() and data[3392:] == b.tobytes()
    assert data == spec_file([(1, a.tobytes()), (1, b.tobytes())])


def test_chain_after_64k_payload():  # offsets 64 then 65664
    data, offsets = write_blob_file([np.zeros(32768, np.float16), np.ones(3, np.float16)])
    assert offsets == [64, 65664]


def test_mixed_dtypes_no_tail_padding():  # fp16[10] + fp32[7] + int8[5] -> 389 bytes
    arrays = [np.arange(10, dtype=np.float16), np.arange(7, dtype=np.float32), np.arange(5, dtype=np.int8)]
    data, offsets = write_blob_file(arrays)
    assert len(data) == 389
    assert offsets == [64, 192, 320]
    assert data[148:192] == bytes(44) and data[284:320] == bytes(36)  # zero padding between blobs
    assert data == spec_file([(1, arrays[0].tobytes()), (2, arrays[1].tobytes()), (4, arrays[2].tobytes())])


def test_empty_file_and_empty_payload():
    data, offsets = write_blob_file([])
    assert data == header(0) and offsets == []
    assert list_blobs(data, strict=True) == []
    data, offsets = write_blob_file([np.zeros(0, np.float16), np.arange(3, dtype=np.int8)])
    assert offsets == [64, 128] and len(data) == 195
    assert read_blob(data, 64).size == 0
    assert read_blob(data, 128, strict=True).tolist() == [0, 1, 2]


@pytest.mark.parametrize("dtype", list(NUMPY_CODES), ids=lambda d: np.dtype(d).name)
def test_every_numpy_dtype_roundtrip(dtype):
    info = np.finfo(dtype) if np.dtype(dtype).kind == "f" else np.iinfo(dtype)
    a = np.array([[info.min, 0, 1], [info.max, 2, 3]], dtype=dtype)
    data, offsets = write_blob_file([a, a[::-1].T])  # second one is non-contiguous
    recs = list_blobs(data, strict=True)
    assert [r.dtype_code for r in recs] == [NUMPY_CODES[dtype]] * 2
    assert recs[0].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(read_blob(data, offsets[0], dtype=dtype, shape=(2, 3), strict=True), a)
    np.testing.assert_array_equal(read_blob(data, offsets[1], shape=(3, 2)), a[::-1].T)
    assert read_blob(data, offsets[0]).shape == (6,)


def test_big_endian_input_is_stored_little_endian():
    a = np.arange(5, dtype=">f2")
    assert write_blob_file([a]) == write_blob_file([a.astype("<f2")])


@pytest.mark.parametrize("dtype", [np.float64, np.bool_, np.complex64, np.int64, object, "V4"])
def test_unsupported_dtype_named(dtype):
    a = np.zeros(3, dtype=dtype)
    with pytest.raises(orion.BlobFormatError, match=str(np.dtype(dtype))):
        write_blob_file([a])


@pytest.mark.parametrize("code", range(1, 18))
def test_every_blob_dtype_code_native(code):
    bits = BITS[code]
    if bits % 8:
        payload, padding = pack_subbyte(list(range(5)), bits)
    else:
        payload, padding = bytes(range(3 * bits // 8)), 0
    data, offsets = _native.blob_write([(code, payload, padding), (code, bytearray(payload), padding)])
    assert data == spec_file([(code, payload, padding)] * 2)
    rec = _native.blob_read(data, offsets[1], strict=True)
    assert (rec["dtype_code"], rec["payload"], rec["padding_bits"], rec["warnings"]) == (code, payload, padding, [])
    elements = 5 if bits % 8 else 3
    _native.blob_read(data, 64, declared=(code, elements))


def test_uint4_packing_example():  # uint4 [1,2,3] -> 21 03, padding 4
    assert pack_subbyte([1, 2, 3], 4) == (bytes([0x21, 0x03]), 4)
    data, _ = _native.blob_write([(11, bytes([0x21, 0x03]), 4)])
    assert struct.unpack_from("<IIQQQ", data, 64) == (SENTINEL, 11, 2, 128, 4)


@pytest.mark.parametrize("blob, match", [
    ((0, b"ab"), "dtype code 0"),
    ((18, b"ab"), "dtype code 18"),
    ((1, b"abc"), "not a multiple of the 2-byte Float16"),
    ((2, b"abcdef"), "not a multiple of the 4-byte Float32"),
    ((1, b"ab", 3), "padding_bits is 3, expected 0 for Float16"),
    ((11, b"a", 8), "padding_bits is 8, expected 0..7"),
    ((11, b"", 4), "padding_bits is 4"),
])
def test_writer_rejects_bad_input(blob, match):
    with pytest.raises(orion.BlobFormatError, match=match):
        _native.blob_write([(1, b"ok"), blob])


def test_writer_accepts_any_contiguous_buffer():
    arr = np.arange(8, dtype=np.float16)
    for buf in (arr, arr.tobytes(), bytearray(arr.tobytes()), memoryview(arr.tobytes())):
        data, _ = _native.blob_write([(1, buf)])
        assert data == spec_file([(1, arr.tobytes())])
    with pytest.raises((BufferError, ValueError)):
        _native.blob_write([(1, arr[::2])])  # non-contiguous buffers are refused, not misread


# ---------------------------------------------------------------------------------------------
# Reader: every check (blob.cpp), errors vs warnings, in both option modes.

@pytest.mark.parametrize("n", [0, 10, 63])
def test_error_file_shorter_than_header(n):
    for strict in (False, True):
        with pytest.raises(orion.BlobFormatError, match=f"blob file is {n} bytes, shorter than the 64-byte storage header"):
            _native.blob_read(bytes(n), 64, strict=strict)
        with pytest.raises(orion.BlobFormatError, match="shorter than the 64-byte"):
            _native.blob_list(bytes(n), strict)


@pytest.mark.parametrize("version", [0, 1, 3, 0xFFFFFFFF])
def test_error_version(version):
    data = bytearray(two_blob_file())
    struct.pack_into("<I", data, 4, version)
    for strict in (False, True):
        with pytest.raises(orion.BlobFormatError, match=f"storage header at offset 4: version is {version}, expected 2"):
            _native.blob_read(data, 64, strict=strict, ignore_sentinel=True)
        with pytest.raises(orion.BlobFormatError, match="version"):
            _native.blob_list(data, strict)


@pytest.mark.parametrize("offset, match", [
    (0, "offset 0 points into the 64-byte storage header.*64 for the first blob.*C08"),
    (32, "offset 32 points into the 64-byte storage header"),
    (100, "offset 100 is not 64-byte aligned; expected a multiple of 64"),
    (129, "offset 129 is not 64-byte aligned"),
    (256, "blob metadata at offset 256: the 64-byte record extends past the end of the 261-byte file"),
    (2**64 - 64, "offset 18446744073709551552: the 64-byte record extends past the end"),
    (-1, "offset -1 is out of range"),
    (2**64, "out of range"),
])
def test_error_metadata_offset(offset, match):
    data = two_blob_file()
    for strict in (False, True):
        for ignore in (False, True):
            with pytest.raises(orion.BlobFormatError, match=match):
                _native.blob_read(data, offset, strict=strict, ignore_sentinel=ignore)


def test_error_sentinel_and_c08_permissive():
    data = bytearray(two_blob_file())
    struct.pack_into("<I", data, 192, 0)
    msg = "blob metadata at offset 192: sentinel is 0x00000000, expected 0xDEADBEEF"
    for strict in (False, True):
        with pytest.raises(orion.BlobFormatError, match=msg):
            _native.blob_read(data, 192, strict=strict)
    # ignore_sentinel: a warning, payload taken at offset + 64 whatever follows
    rec = _native.blob_read(data, 192, ignore_sentinel=True)
    assert not rec["metadata_valid"]
    assert rec["payload"] == bytes(data[256:])
    assert any(msg in w and "C08" in w for w in rec["warnings"])
    assert any("count is 2, but the record chain from offset 64 holds 1 record" in w for w in rec["warnings"])
    # ... but the broken chain still violates the count rule, an error under strict
    with pytest.raises(orion.BlobFormatError, match="count is 2.*strict spec"):
        _native.blob_read(data, 192, strict=True, ignore_sentinel=True)
    # a bad sentinel alone (chain intact: a record was overwritten in a 1-blob file) passes strict too
    one = bytearray(spec_file([(1, bytes(8))]))
    struct.pack_into("<I", one, 64, 0xFEEDFACE)
    one[0] = 0
    rec = _native.blob_read(one, 64, strict=True, ignore_sentinel=True)
    assert rec["warnings"] == ["blob metadata at offset 64: sentinel is 0xFEEDFACE, expected 0xDEADBEEF; "
                               "ignored, payload taken at offset 128 [C08]"]
    with pytest.raises(orion.BlobFormatError, match=msg):
        _native.blob_list(data)


def test_c08_wrong_offset_128_reads_garbage_when_permissive():
    data = write_blob_file([np.arange(64, dtype=np.float16)])[0]
    with pytest.raises(orion.BlobFormatError, match="offset 128: sentinel is 0x3C000000"):
        read_blob(data, 128, dtype=np.float16, shape=(4,))
    with pytest.warns(BlobFormatWarning, match="C08"):
        garbage = read_blob(data, 128, dtype=np.float16, shape=(4,), ignore_sentinel=True)
    np.testing.assert_array_equal(garbage, np.arange(32, 36, dtype=np.float16))  # silent garbage, as on HW
    with pytest.raises(orion.BlobFormatError, match="needs 4096 payload bytes at offset 192, but only 64 remain"):
        _native.blob_read(data, 128, ignore_sentinel=True, declared=(1, 2048))
    with pytest.raises(orion.BlobFormatError, match="pass dtype"), pytest.warns(BlobFormatWarning):
        read_blob(data, 128, ignore_sentinel=True)


@pytest.mark.parametrize("code", [0, 18, 0xFFFFFFFF])
def test_error_unknown_dtype(code):
    data = bytearray(two_blob_file())
    struct.pack_into("<I", data, 68, code)
    for strict in (False, True):
        with pytest.raises(orion.BlobFormatError, match=f"offset 64: mil_dtype \\(offset 68\\) is {code}, expected a BlobDataType code 1..17"):
            _native.blob_read(data, 64, strict=strict)
        with pytest.raises(orion.BlobFormatError, match="mil_dtype"):
            _native.blob_list(data, strict)


@pytest.mark.parametrize("offset, size", [(192, 6), (192, 2**63), (192, U64_MAX), (192, U64_MAX - 255),
                                          (64, 2**64 - 128), (64, 134)])
def test_error_payload_past_end(offset, size):
    data = bytearray(two_blob_file())
    struct.pack_into("<Q", data, offset + 8, size)
    avail = len(data) - offset - 64
    for strict in (False, True):
        with pytest.raises(orion.BlobFormatError,
                           match=f"offset {offset}: size_in_bytes \\(offset {offset + 8}\\) is {size}, but only {avail} bytes follow"):
            _native.blob_read(data, offset, strict=strict)
        with pytest.raises(orion.BlobFormatError, match="size_in_bytes"):
            _native.blob_list(data, strict)


def test_error_declaration_mismatch():
    data = two_blob_file()
    with pytest.raises(orion.BlobFormatError,
                       match=r"offset 64: mil_dtype \(offset 68\) is Float16 \(1\), expected Float32 \(2\) as declared"):
        _native.blob_read(data, 64, declared=(2, 5))
    with pytest.raises(orion.BlobFormatError,
                       match=r"offset 64: size_in_bytes \(offset 72\) is 20, expected 22 \(11 Float16 elements"):
        _native.blob_read(data, 64, declared=(1, 11))
    with pytest.raises(orion.BlobFormatError, match="overflow a 64-bit byte count"):
        _native.blob_read(data, 64, declared=(2, 2**62))
    _native.blob_read(data, 64, declared=(1, 10))
    # The numpy API applies the same rules with dtype/shape.
    with pytest.raises(orion.BlobFormatError, match=r"mil_dtype \(offset 68\) is Float16 \(1\), expected Int8"):
        read_blob(data, 64, dtype=np.int8)
    with pytest.raises(orion.BlobFormatError, match=r"is Float16 \(1\), expected Int16"):
        read_blob(data, 64, dtype=np.int16, shape=(10,))
    with pytest.raises(orion.BlobFormatError, match=r"size_in_bytes \(offset 72\) is 20, expected 18"):
        read_blob(data, 64, dtype=np.float16, shape=(3, 3))
    with pytest.raises(orion.BlobFormatError, match=r"size_in_bytes \(offset 72\) is 20, expected 24"):
        read_blob(data, 64, shape=(12,))
    with pytest.raises(orion.BlobFormatError, match="negative"):
        read_blob(data, 64, shape=(-1, 10))
    assert read_blob(data, 64, dtype="float16", shape=(2, 5)).shape == (2, 5)


def test_read_blob_without_numpy_equivalent():
    data, _ = _native.blob_write([(8, b"\x21\x03", 4)])
    with pytest.raises(orion.BlobFormatError, match=r"Int4 \(8\) has no numpy equivalent"):
        read_blob(data, 64)
    odd = spec_file([(1, b"abc")])  # fp16 record with an odd byte count
    with pytest.raises(orion.BlobFormatError, match="not a multiple of the 2-byte float16"):
        read_blob(odd, 64)


# "warn" rows: a warning by default, an error with strict_spec.
def _check_warn_row(data: bytes, offset: int, match: str):
    loose, strict = read_both(data, offset)
    assert any(match in w for w in loose["warnings"]), loose["warnings"]
    assert isinstance(strict, orion.BlobFormatError) and match in str(strict)
    recs, msgs = _native.blob_list(data)
    assert any(match in w for w in msgs)
    with pytest.raises(orion.BlobFormatError, match="strict spec"):
        _native.blob_list(data, True)
    with pytest.warns(BlobFormatWarning):
        read_blob(data, offset)
    with pytest.raises(orion.BlobFormatError):
        read_blob(data, offset, strict=True)
    return loose


@pytest.mark.parametrize("count, records", [(1, "2 records"), (0, "2 records"), (3, "2 records"), (2**32 - 1, "2 records")])
def test_warn_count_mismatch(count, records):
    data = bytearray(two_blob_file())
    struct.pack_into("<I", data, 0, count)
    loose = _check_warn_row(bytes(data), 192, f"storage header at offset 0: count is {count}, but the record chain from offset 64 holds {records}")
    assert loose["payload"] == bytes([1, 2, 3, 4, 5])


@pytest.mark.parametrize("value", [0, 128 + 64, 1, U64_MAX])
def test_warn_offset_field(value):
    data = bytearray(two_blob_file())
    struct.pack_into("<Q", data, 192 + 16, value)
    loose = _check_warn_row(bytes(data), 192, f"blob metadata at offset 192: offset field (offset 208) is {value}, expected 256")
    assert loose["payload"] == bytes([1, 2, 3, 4, 5])  # payload always at metadata + 64
    assert loose["data_offset"] == value


@pytest.mark.parametrize("field", range(4))
def test_warn_metadata_reserved(field):
    data = bytearray(two_blob_file())
    off = 64 + 32 + 8 * field
    struct.pack_into("<Q", data, off, 0xAB << (8 * field))
    loose = _check_warn_row(bytes(data), 64, f"blob metadata at offset 64: reserved field at offset {off} is 0x")
    assert loose["payload"] == np.arange(10, dtype=np.float16).tobytes()


@pytest.mark.parametrize("field", range(7))
def test_warn_header_reserved(field):
    data = bytearray(two_blob_file())
    off = 8 + 8 * field
    struct.pack_into("<Q", data, off, 1 << 63)
    _check_warn_row(bytes(data), 192, f"storage header at offset {off}: reserved field is 0x8000000000000000, expected 0")


def test_hard_error_wins_over_strict_deviation():
    data = bytearray(two_blob_file())
    struct.pack_into("<I", data, 0, 7)          # a deviation
    struct.pack_into("<I", data, 192, 0x1234)   # and a real error
    with pytest.raises(orion.BlobFormatError, match="sentinel is 0x00001234"):
        _native.blob_read(data, 192, strict=True)


def test_upstream_maderix_style_multiblob_file():
    """count left at 1 and offset fields 0: loads with warnings, rejected under strict (C32)."""
    a, b, c = (np.full(32, i, np.float16).tobytes() for i in range(3))
    data = bytearray(spec_file([(1, a), (1, b), (1, c)], count=1))
    for m in (64, 192, 320):
        struct.pack_into("<Q", data, m + 16, 0)
    data = bytes(data)
    for m, payload in zip((64, 192, 320), (a, b, c)):
        loose, strict = read_both(data, m)
        assert loose["payload"] == payload
        assert len(loose["warnings"]) == 2
        assert isinstance(strict, orion.BlobFormatError)
    recs, msgs = _native.blob_list(data)
    assert [r["metadata_offset"] for r in recs] == [64, 192, 320] and len(msgs) == 4


def test_upstream_orion_u32_fields_are_spec_exact():
    """Orion writes size/offset as u32 into zeroed memory: the same bytes below 4 GiB."""
    payload = np.arange(16, dtype=np.float16).tobytes()
    hand = bytearray(128)
    hand[0] = 1
    hand[4] = 2
    struct.pack_into("<II", hand, 64, SENTINEL, 1)
    struct.pack_into("<I", hand, 72, len(payload))
    struct.pack_into("<I", hand, 80, 128)
    hand = bytes(hand) + payload
    assert hand == write_blob_file([np.arange(16, dtype=np.float16)])[0]
    assert read_blob(hand, 64, strict=True).tolist() == list(range(16))


def test_list_records_and_trailing_bytes():
    data = two_blob_file()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recs = list_blobs(data, strict=True)
    assert recs == [BlobRecord(64, 1, "Float16", 20, 128, 0), BlobRecord(192, 4, "Int8", 5, 256, 0)]
    # Zero padding after the last payload is tolerated and reported (the writer leaves none).
    recs, msgs = _native.blob_list(pad64(data), True)
    assert len(recs) == 2 and msgs == ["file has 59 bytes after the last payload (which ends at offset 261); expected none"]
    # A broken chain (second record's sentinel) is an error naming the offset.
    bad = bytearray(data)
    bad[192] = 0
    with pytest.raises(orion.BlobFormatError, match="offset 192: sentinel"):
        list_blobs(bytes(bad))
    # Header only, count 1: zero records found.
    with pytest.warns(BlobFormatWarning, match="count is 1, but the record chain from offset 64 holds 0 records"):
        assert list_blobs(header(1)) == []


def test_truncation_at_every_byte():
    data = two_blob_file()
    assert len(data) == 261
    for n in range(len(data)):
        cut = data[:n]
        for strict in (False, True):
            # the last blob always extends to the end of the file
            with pytest.raises(orion.BlobFormatError):
                _native.blob_read(cut, 192, strict=strict)
            if n < 148:
                with pytest.raises(orion.BlobFormatError):
                    _native.blob_read(cut, 64, strict=strict)
            else:  # first blob intact; strict still sees count=2 with one record
                loose, strict_res = read_both(cut, 64)
                assert any("count is 2" in w for w in loose["warnings"])
                assert isinstance(strict_res, orion.BlobFormatError)
        # list(): an error, or (cut inside the padding after blob 0) a count mismatch
        try:
            recs, msgs = _native.blob_list(cut)
            assert len(recs) == (0 if n == 64 else 1) and any("count is 2" in w for w in msgs), (n, msgs)
            assert n == 64 or 148 <= n <= 192
        except orion.BlobFormatError:
            pass
        with pytest.raises(orion.BlobFormatError):
            _native.blob_list(cut, True)
        with pytest.raises(orion.BlobFormatError), warnings.catch_warnings():
            warnings.simplefilter("ignore", BlobFormatWarning)
            for r in list_blobs(cut):
                read_blob(cut, r.metadata_offset)
            read_blob(cut, 192)


def test_reader_accepts_any_buffer():
    data = two_blob_file()
    for buf in (data, bytearray(data), memoryview(data), np.frombuffer(data, np.uint8)):
        assert _native.blob_read(buf, 192)["payload"] == bytes([1, 2, 3, 4, 5])
        assert len(_native.blob_list(buf)[0]) == 2
    assert read_blob(memoryview(data), 64).tolist() == list(range(10))
    assert read_blob(data, np.uint64(192)).tolist() == [1, 2, 3, 4, 5]  # numpy integer offsets
    with pytest.raises(TypeError):
        _native.blob_read(data, 64.0)


# ---------------------------------------------------------------------------------------------
# save_blob_file: atomic replace.

def test_save_blob_file_atomic(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"old")
    arrays = [np.arange(10, dtype=np.float16), np.arange(5, dtype=np.int8)]
    offsets = save_blob_file(path, arrays)
    assert offsets == [64, 192]
    assert path.read_bytes() == write_blob_file(arrays)[0]
    assert os.listdir(tmp_path) == ["w.bin"]
    with pytest.raises(orion.BlobFormatError, match="float64"):
        save_blob_file(path, [np.zeros(3)])
    assert path.read_bytes() == write_blob_file(arrays)[0]  # untouched
    assert os.listdir(tmp_path) == ["w.bin"]
    save_blob_file(str(tmp_path / "new.bin"), arrays[:1])
    assert sorted(os.listdir(tmp_path)) == ["new.bin", "w.bin"]


# ---------------------------------------------------------------------------------------------
# coremltools 9.0 as the oracle.

@pytest.fixture(scope="module")
def milstorage():
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        pytest.importorskip("coremltools")
        return pytest.importorskip("coremltools.libmilstoragepython")


CT_IO = {np.float16: "fp16", np.float32: "float", np.uint8: "uint8", np.int8: "int8", np.int16: "int16",
         np.uint16: "uint16", np.int32: "int32", np.uint32: "uint32"}


def ct_write(milstorage, path, arrays) -> tuple[bytes, list[int]]:
    w = milstorage._BlobStorageWriter(str(path))
    offsets = []
    for a in arrays:
        kind = CT_IO[a.dtype.type]
        offsets.append(getattr(w, f"write_{kind}_data")(a.view(np.uint16) if kind == "fp16" else a))
    del w  # flushes and closes
    return path.read_bytes(), offsets


def ct_read(milstorage, path, offset, dtype):
    r = milstorage._BlobStorageReader(str(path))
    out = getattr(r, f"read_{CT_IO[np.dtype(dtype).type]}_data")(offset)
    return np.asarray(out).view(np.float16) if np.dtype(dtype) == np.float16 else np.asarray(out)


def sample(dtype, n, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)


CASES = {
    "fp16": [sample(np.float16, 10)],
    "fp32": [sample(np.float32, 7)],
    "int8": [sample(np.int8, 5)],
    "fp16+fp32+int8": [sample(np.float16, 10), sample(np.float32, 7), sample(np.int8, 5)],
    "two_40x40": [sample(np.float16, 1600, 1), sample(np.float16, 1600, 2)],
    "every_dtype": [sample(d, 3 + i, i) for i, d in enumerate(CT_IO)],
    "empty_payload": [np.zeros(0, np.float16), sample(np.int8, 3)],
}


@pytest.mark.parametrize("case", list(CASES))
def test_coremltools_writer_bytes_identical(milstorage, tmp_path, case):
    arrays = CASES[case]
    ct_bytes, ct_offsets = ct_write(milstorage, tmp_path / "ct.bin", arrays)
    ours, offsets = write_blob_file(arrays)
    assert offsets == ct_offsets
    assert ours == ct_bytes


@pytest.mark.parametrize("case", list(CASES))
def test_coremltools_reads_our_files(milstorage, tmp_path, case):
    arrays = CASES[case]
    path = tmp_path / "ours.bin"
    offsets = save_blob_file(path, arrays)
    for a, off in zip(arrays, offsets):
        if a.size == 0:
            continue  # coremltools' reader raises "index out of bounds" on empty payloads, even its own
        np.testing.assert_array_equal(ct_read(milstorage, path, off, a.dtype), a)


@pytest.mark.parametrize("case", list(CASES))
def test_we_read_coremltools_files(milstorage, tmp_path, case):
    arrays = CASES[case]
    ct_bytes, ct_offsets = ct_write(milstorage, tmp_path / "ct.bin", arrays)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a spec-exact file gives no warnings
        recs = list_blobs(ct_bytes, strict=True)
        assert [r.metadata_offset for r in recs] == ct_offsets
        for a, off in zip(arrays, ct_offsets):
            got = read_blob(ct_bytes, off, dtype=a.dtype, shape=a.shape, strict=True)
            np.testing.assert_array_equal(got, a)


@pytest.mark.parametrize("kind, code, bits, signed", [
    ("int4", 8, 4, True), ("uint1", 9, 1, False), ("uint2", 10, 2, False), ("uint3", 12, 3, False),
    ("uint4", 11, 4, False), ("uint6", 13, 6, False)])
@pytest.mark.parametrize("n", [1, 3, 8, 13])
def test_coremltools_subbyte_packing(milstorage, tmp_path, kind, code, bits, signed, n):
    rng = np.random.default_rng(n)
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    values = rng.integers(lo, hi, n, endpoint=True).astype(np.int8 if signed else np.uint8)
    w = milstorage._BlobStorageWriter(str(tmp_path / "ct.bin"))
    assert getattr(w, f"write_{kind}_data")(values) == 64
    del w
    ct_bytes = (tmp_path / "ct.bin").read_bytes()
    payload, padding = pack_subbyte(values.tolist(), bits)
    ours, _ = _native.blob_write([(code, payload, padding)])
    assert ours == ct_bytes
    rec = _native.blob_read(ct_bytes, 64, strict=True, declared=(code, n))
    assert (rec["payload"], rec["padding_bits"]) == (payload, padding)
    back = getattr(milstorage._BlobStorageReader(str(tmp_path / "ct.bin")), f"read_{kind}_data")(64)
    np.testing.assert_array_equal(np.asarray(back), values)
