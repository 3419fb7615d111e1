#!/usr/bin/env python3
"""atheris fuzz harness for the MILBlob v2 reader (_native.blob_list / _native.blob_read).

    PYTHONPATH=python:<build dir> python fuzz/fuzz_blob.py -max_total_time=600 [corpus_dir]

The native module is built with gcc, so libFuzzer gets no coverage from the C++ code. Two stand-ins:
half of the inputs are decoded into *structured* files (header + records with each field either right
or hostile: u64 sizes/offsets near 2^64, unknown dtypes, broken sentinels, truncation), the other half
are raw bytes; and every error/warning message is classified by an instrumented Python if-chain, so
each native validation branch that fires is a new coverage edge. For memory errors run it against an
ORION_SANITIZE=ON build with LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0.

Anything but orion.BlobFormatError is a finding, and so is a violated invariant:
- a successful read returns exactly size_in_bytes bytes taken at metadata + 64;
- every record that list() returns reads back with the same fields (same strictness);
- a file that lists cleanly under strict rules is re-created byte-exactly by blob_write (except the
  padding bytes between blobs, which readers ignore).
"""

from __future__ import annotations

import struct
import sys

import atheris

import orion  # not instrumented: the target is native code, see classify()
from orion import _native

U64 = 2**64 - 1
SENTINEL = 0xDEADBEEF
BYTES_PER_ELEMENT = {1: 2, 2: 4, 3: 1, 4: 1, 5: 2, 6: 2, 7: 2, 14: 4, 15: 4, 16: 1, 17: 1}


@atheris.instrument_func
def pick_u64(fdp: atheris.FuzzedDataProvider, good: int) -> int:
    """The right value most of the time, otherwise something hostile."""
    choice = fdp.ConsumeIntInRange(0, 7)
    if choice < 4:
        return good
    if choice == 4:
        return U64 - fdp.ConsumeIntInRange(0, 256)
    if choice == 5:
        return (good + fdp.ConsumeIntInRange(-64, 64)) & U64
    if choice == 6:
        return 1 << fdp.ConsumeIntInRange(0, 63)
    return fdp.ConsumeIntInRange(0, U64)


@atheris.instrument_func
def structured_file(fdp: atheris.FuzzedDataProvider) -> tuple[bytes, list[int]]:
    n = fdp.ConsumeIntInRange(0, 4)
    count = pick_u64(fdp, n) & 0xFFFFFFFF
    version = 2 if fdp.ConsumeBool() or fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, 0xFFFFFFFF)
    reserved = [0 if fdp.ConsumeIntInRange(0, 15) else fdp.ConsumeIntInRange(0, U64) for _ in range(7)]
    out = bytearray(struct.pack("<II7Q", count, version, *reserved))
    offsets = []
    for i in range(n):
        out += bytes(-len(out) % 64) if fdp.ConsumeIntInRange(0, 7) else bytes(fdp.ConsumeIntInRange(0, 63))
        m = len(out)
        offsets.append(m)
        payload = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 96))
        sentinel = SENTINEL if fdp.ConsumeIntInRange(0, 7) else fdp.ConsumeIntInRange(0, 0xFFFFFFFF)
        dtype = fdp.ConsumeIntInRange(1, 17) if fdp.ConsumeIntInRange(0, 7) else fdp.ConsumeIntInRange(0, 0xFFFFFFFF)
        size = pick_u64(fdp, len(payload))
        data_offset = pick_u64(fdp, m + 64)
        padding = pick_u64(fdp, 0)
        meta_reserved = [0 if fdp.ConsumeIntInRange(0, 15) else fdp.ConsumeIntInRange(0, U64) for _ in range(4)]
        out += struct.pack("<IIQQQ4Q", sentinel, dtype, size, data_offset, padding, *meta_reserved) + payload
    cut = fdp.ConsumeIntInRange(0, 3)
    if cut == 0 and out:
        out = out[: fdp.ConsumeIntInRange(0, len(out) - 1)]  # truncation
    elif cut == 1:
        out += fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 128))  # trailing garbage
    return bytes(out), offsets


# One branch per validation message of blob/blob.cpp (most specific phrase first). Coverage is per
# code location, so each message kind (and strict variant of the deviations) needs its own statement:
# a new kind of error or warning firing is then a new edge for libFuzzer.
@atheris.instrument_func
def classify(msg: str) -> str:
    strict = msg.endswith("(strict spec)")
    if "ignored, payload" in msg:
        return "sentinel ignored"
    if "as declared" in msg:
        return "declaration mismatch"
    if "declared dtype code" in msg:
        return "declared dtype unknown"
    if "overflow a 64-bit" in msg:
        return "declared count overflows"
    if "payload bytes at offset" in msg:
        return "declared size past end"
    if "shorter than the 64-byte" in msg:
        return "short file"
    if "version is" in msg:
        return "version"
    if "count is" in msg:
        return "count strict" if strict else "count"
    if "reserved field is" in msg:
        return "header reserved strict" if strict else "header reserved"
    if "points into the 64-byte" in msg:
        return "offset in header"
    if "not 64-byte aligned" in msg:
        return "offset unaligned"
    if "out of range" in msg:
        return "offset out of range"
    if "extends past the end" in msg:
        return "metadata past end"
    if "sentinel is" in msg:
        return "sentinel"
    if "expected a BlobDataType" in msg:
        return "dtype unknown"
    if "size_in_bytes (offset" in msg:
        return "payload past end"
    if "offset field (offset" in msg:
        return "offset field strict" if strict else "offset field"
    if "reserved field at offset" in msg:
        return "metadata reserved strict" if strict else "metadata reserved"
    if "bytes after the last payload" in msg:
        return "trailing bytes"
    raise AssertionError(f"unclassified message: {msg}")


@atheris.instrument_func
def check_read(data: bytes, offset: int, strict: bool, ignore: bool, declared) -> dict | None:
    try:
        rec = _native.blob_read(data, offset, strict, ignore, declared)
    except orion.BlobFormatError as e:
        classify(str(e))
        return None
    for w in rec["warnings"]:
        classify(w)
    start = offset + 64
    if rec["metadata_valid"]:
        size = rec["size_in_bytes"]
        assert rec["payload"] == data[start:start + size] and len(rec["payload"]) == size, "payload window"
    else:
        assert ignore and rec["payload"] == data[start:], "ignored-sentinel payload window"
    assert strict is False or ignore or not rec["warnings"], "strict read returned warnings"
    return rec


@atheris.instrument_func
def check_list_consistency(data: bytes, strict: bool) -> None:
    try:
        records, warnings = _native.blob_list(data, strict)
    except orion.BlobFormatError as e:
        classify(str(e))
        return
    for w in warnings:
        classify(w)
    for r in records:
        rec = check_read(data, r["metadata_offset"], strict, False, None)
        assert rec is not None, f"listed record at {r['metadata_offset']} does not read"
        for key in r:
            assert rec[key] == r[key], f"list/read disagree on {key}"
    if not strict or warnings:
        return
    # Clean under strict rules: the writer must reproduce it.
    blobs = [(r["dtype_code"], _native.blob_read(data, r["metadata_offset"])["payload"], r["padding_bits"])
             for r in records]
    try:
        rebuilt, offsets = _native.blob_write(blobs)
    except orion.BlobFormatError:
        return  # e.g. padding_bits on a byte type or a ragged fp16 size: readable, but not writable
    assert offsets == [r["metadata_offset"] for r in records], "writer offsets differ"
    assert len(rebuilt) == len(data), "writer size differs"
    assert rebuilt[:64] == data[:64], "writer header differs"
    for r in records:
        m, end = r["metadata_offset"], r["metadata_offset"] + 64 + r["size_in_bytes"]
        assert rebuilt[m:end] == data[m:end], f"writer record at {m} differs"


@atheris.instrument_func
def test_one_input(raw: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(raw)
    structured = fdp.ConsumeBool()
    strict, ignore = fdp.ConsumeBool(), fdp.ConsumeBool()
    if structured:
        data, offsets = structured_file(fdp)
    else:
        offsets = []
    probes = offsets + [64, fdp.ConsumeIntInRange(0, 1 << 12) * 64, fdp.ConsumeIntInRange(0, U64)]
    code = fdp.ConsumeIntInRange(0, 18)
    declared = (code, fdp.ConsumeIntInRange(0, 64) if fdp.ConsumeBool() else fdp.ConsumeIntInRange(0, U64)) \
        if fdp.ConsumeBool() else None
    if not structured:
        data = fdp.ConsumeBytes(fdp.remaining_bytes())

    check_list_consistency(data, strict)
    for off in probes:
        check_read(data, off, strict, ignore, None)
        if declared is not None:
            check_read(data, off, strict, ignore, declared)


def main() -> None:
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
