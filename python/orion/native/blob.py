"""MILBlob weight files (Core ML "MIL Blob Storage" format v2) at the numpy level.

A blob file is a 64-byte storage header followed by (64-byte metadata record, payload) pairs, each
record on a 64-byte boundary. A MIL program refers to one tensor of such a file with
``BLOBFILE(path = ..., offset = uint64(N))`` where ``N`` is the offset of the tensor's *metadata
record* (64 for the first blob), which is what :func:`write_blob_file` returns and what
:func:`read_blob` takes.

The writer is byte-identical to coremltools 9.0's ``_BlobStorageWriter``. The reader validates more
than coremltools does; spec deviations that upstream files commit (wrong ``count``, wrong payload
``offset`` field, non-zero reserved fields) are reported as :class:`BlobFormatWarning` unless
``strict=True``, which turns them into :class:`orion.BlobFormatError`.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .. import _native
from ..fileio import write_bytes_atomic
from ..errors import BlobFormatError

__all__ = [
    "BlobRecord", "BlobFormatWarning", "DTYPE_CODES", "write_blob_file", "save_blob_file", "read_blob",
    "list_blobs",
]

#: numpy dtype -> MIL BlobDataType code (only the types numpy can hold natively).
DTYPE_CODES: dict[np.dtype, int] = {
    np.dtype(np.float16): 1, np.dtype(np.float32): 2, np.dtype(np.uint8): 3, np.dtype(np.int8): 4,
    np.dtype(np.int16): 6, np.dtype(np.uint16): 7, np.dtype(np.int32): 14, np.dtype(np.uint32): 15,
}
_NUMPY_DTYPES = {code: dt for dt, code in DTYPE_CODES.items()}


class BlobFormatWarning(UserWarning):
    """A blob file deviates from the spec in a way upstream writers do (the file still loads)."""


@dataclass(frozen=True)
class BlobRecord:
    """One metadata record of a blob file, with its fields as stored."""

    metadata_offset: int  #: the MIL ``BLOBFILE`` offset of this tensor
    dtype_code: int  #: MIL BlobDataType code (1 = Float16, ...)
    dtype_name: str  #: "Float16", "Int8", ...
    size_in_bytes: int  #: payload size
    data_offset: int  #: stored payload offset (spec: ``metadata_offset + 64``)
    padding_bits: int  #: unused bits of the last byte (sub-byte types only)

    @property
    def dtype(self) -> np.dtype | None:
        """The numpy dtype of the payload, or None for types numpy cannot hold (int4, bf16, fp8...)."""
        return _NUMPY_DTYPES.get(self.dtype_code)


def _code_for(dtype: np.dtype) -> int:
    # Byte order does not matter here (the writer stores little-endian); structured types never match.
    key = np.dtype(f"{dtype.kind}{dtype.itemsize}") if dtype.kind in "fiu" and dtype.fields is None else None
    code = DTYPE_CODES.get(key)
    if code is None:
        supported = ", ".join(str(d) for d in DTYPE_CODES)
        raise BlobFormatError(f"dtype {dtype} cannot be stored in a blob file; supported: {supported}")
    return code


def _warn(messages: Sequence[str]) -> None:
    for msg in messages:
        warnings.warn(msg, BlobFormatWarning, stacklevel=3)


def write_blob_file(arrays: Sequence[np.ndarray]) -> tuple[bytes, list[int]]:
    """Serialize ``arrays`` into one spec-exact blob file.

    Each array is stored in row-major order with the blob dtype of its numpy dtype (float16, float32,
    uint8, int8, int16, uint16, int32, uint32; anything else raises :class:`orion.BlobFormatError`).
    An :class:`orion.quant.PackedInts` is stored as its packed payload with its MIL dtype (int4,
    uint1..uint6, ...) and padding bits, as coremltools writes sub-byte tensors.
    Returns ``(file_bytes, offsets)`` where ``offsets[i]`` is the metadata offset of ``arrays[i]``,
    i.e. the value for ``BLOBFILE(..., offset = uint64(offsets[i]))``.
    """
    blobs = []
    for a in arrays:
        if hasattr(a, "blob_dtype_code"):  # orion.quant.PackedInts: sub-byte (or int8) payload, already packed
            blobs.append((a.blob_dtype_code, np.ascontiguousarray(a.payload, np.uint8), a.padding_bits))
            continue
        a = np.asarray(a)
        code = _code_for(a.dtype)
        # Little-endian, C-contiguous bytes; no copy when the array already is.
        a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
        blobs.append((code, a))
    data, offsets = _native.blob_write(blobs)
    return data, list(offsets)


def save_blob_file(path: str | os.PathLike, arrays: Sequence[np.ndarray]) -> list[int]:
    """Write :func:`write_blob_file` output to ``path`` atomically; returns the metadata offsets.

    The bytes go to a temporary file in the same directory, which is fsynced and then renamed over
    ``path``, so readers (and the ANE compiler) never see a half-written weight file.
    """
    data, offsets = write_blob_file(arrays)
    write_bytes_atomic(path, data)
    return offsets


def _check_read_args(data, offset, dtype, shape, strict, ignore_sentinel):
    """:func:`read_blob`'s arguments, typed before any of them reaches native code: (byte length of
    ``data``, offset, dtype code or None, shape tuple or None); anything else is a BlobFormatError."""
    try:
        nbytes = memoryview(data).nbytes
    except TypeError:
        raise BlobFormatError(f"blob data must be bytes or another buffer, got {type(data).__name__}") from None
    offset = _index(offset, "offset")
    if offset < 0:
        raise BlobFormatError(f"blob metadata offset {offset} is negative")
    for name, flag in (("strict", strict), ("ignore_sentinel", ignore_sentinel)):
        if not isinstance(flag, (bool, np.bool_)):
            raise BlobFormatError(f"{name} must be True or False, got {flag!r}")
    want = None
    if dtype is not None:
        try:
            want = _code_for(np.dtype(dtype))
        except TypeError:
            raise BlobFormatError(f"dtype {dtype!r} is not a numpy dtype") from None
    if shape is not None:
        if isinstance(shape, np.ndarray) and shape.ndim <= 1:
            dims = list(shape.reshape(-1))
        elif isinstance(shape, (tuple, list)):
            dims = list(shape)
        elif isinstance(shape, (int, np.integer)):
            dims = [shape]
        else:
            raise BlobFormatError(f"shape must be an integer or a tuple of integers, got {shape!r:.60}")
        shape = tuple(_index(s, "shape dimension") for s in dims)
        if any(s < 0 for s in shape):
            raise BlobFormatError(f"shape {shape} has a negative dimension")
    return nbytes, offset, want, shape


def _index(v, what: str) -> int:
    """An integer argument (Python or numpy; not a bool, a float or a string that would convert)."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise BlobFormatError(f"{what} must be an integer, got {v!r}")
    return int(v)


def read_blob(data, offset: int, dtype=None, shape=None, strict: bool = False,
              ignore_sentinel: bool = False) -> np.ndarray:
    """Read the tensor whose metadata record sits at ``offset`` (the MIL ``BLOBFILE`` offset).

    ``data`` is the whole file (bytes or any buffer). ``dtype`` and ``shape`` are the declaration of
    the referencing MIL const: when given, the record's dtype code and ``sizeInBytes`` must match them
    (:class:`orion.BlobFormatError` otherwise); when omitted, the dtype comes from the record and the
    result is 1-D. The payload is taken at ``offset + 64`` as the ANE compiler does. ``strict`` turns
    spec deviations into errors; ``ignore_sentinel`` accepts a record without the 0xDEADBEEF sentinel
    (C08 permissive; ``dtype`` is then required). Returns a read-only array.
    """
    nbytes, offset, want, shape = _check_read_args(data, offset, dtype, shape, strict, ignore_sentinel)
    count = None if shape is None else math.prod(shape)
    if count is not None:
        # the byte count against the data before native code sees it: a declaration larger than the file is
        # refused here, whatever its size (the native reader takes 64-bit counts only)
        need = count * (np.dtype(dtype).itemsize if want is not None else 1)
        avail = max(0, nbytes - offset - 64)
        if need > avail:
            what = f"{need} payload bytes" if want is not None else f"at least {need} payload bytes"
            raise BlobFormatError(f"blob metadata at offset {offset}: shape {shape} needs {what}, but only {avail} "
                                  f"follow the record in the {nbytes}-byte file")
    declared = (want, count) if want is not None and count is not None else None
    rec = _native.blob_read(data, offset, strict, ignore_sentinel, declared)
    _warn(rec["warnings"])
    where = f"blob metadata at offset {offset}"
    if not rec["metadata_valid"] and want is None:
        raise BlobFormatError(f"{where}: sentinel ignored, so the record's dtype is unknown; pass dtype=")
    code = rec["dtype_code"] if want is None else want
    np_dtype = _NUMPY_DTYPES.get(code)
    if np_dtype is None:
        raise BlobFormatError(
            f"{where}: dtype {rec['dtype_name']} ({code}) has no numpy equivalent; use list_blobs() and "
            f"_native.blob_read() for the raw payload")
    if declared is None and rec["metadata_valid"] and rec["dtype_code"] != code:
        raise BlobFormatError(
            f"{where}: mil_dtype (offset {offset + 4}) is {rec['dtype_name']} ({rec['dtype_code']}), "
            f"expected {_native.blob_dtype_name(code)} ({code}) for numpy {np_dtype}")
    payload = rec["payload"]
    if count is None:
        if len(payload) % np_dtype.itemsize:
            raise BlobFormatError(
                f"{where}: size_in_bytes (offset {offset + 8}) is {len(payload)}, not a multiple of the "
                f"{np_dtype.itemsize}-byte {np_dtype} element")
        count = len(payload) // np_dtype.itemsize
        shape = (count,)
    elif declared is None and len(payload) != count * np_dtype.itemsize:
        raise BlobFormatError(
            f"{where}: size_in_bytes (offset {offset + 8}) is {len(payload)}, expected "
            f"{count * np_dtype.itemsize} for shape {shape} of {np_dtype}")
    return np.frombuffer(payload, dtype=np_dtype.newbyteorder("<"), count=count).reshape(shape)


def list_blobs(data, strict: bool = False) -> list[BlobRecord]:
    """Walk the record chain of a blob file from offset 64 and return every record.

    A ``count`` field that disagrees with the chain is a :class:`BlobFormatWarning` (an error with
    ``strict``); a malformed record raises :class:`orion.BlobFormatError`.
    """
    records, msgs = _native.blob_list(data, strict)
    _warn(msgs)
    return [BlobRecord(**r) for r in records]
