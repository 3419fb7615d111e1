"""The safetensors format, read and written with numpy (model weights, checkpoints, adapters) (u64 little-endian header length, a JSON header
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``, raw
little-endian tensor bytes). Own implementation instead of the ``safetensors`` package: the format is
tiny, we only need numpy arrays, and reads are zero-copy memory maps with strict validation that names
the file, the tensor and the expectation (:class:`orion.ModelFormatError`)."""

from __future__ import annotations

import json
import math
import mmap
import os
import struct
from typing import BinaryIO, Mapping

import numpy as np

from ..errors import ModelFormatError
from ..fileio import atomic_write, open_for_reading, parse_json

__all__ = ["SafetensorsFile", "read_safetensors", "write_safetensors", "write", "load", "DTYPES"]

DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "U16": np.dtype("<u2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
_NAMES = {np.dtype("<f8"): "F64", np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64",
          np.dtype("<i4"): "I32", np.dtype("<i2"): "I16", np.dtype("<u2"): "U16", np.dtype("i1"): "I8",
          np.dtype("u1"): "U8", np.dtype("?"): "BOOL"}
MAX_HEADER = 100 * 1024 * 1024


class SafetensorsFile:
    """An opened safetensors file: ``names``, ``metadata``, ``info(name)`` and ``get(name)`` (a read-only
    zero-copy array; BF16 is widened to float32)."""

    def __init__(self, path: str):
        self.path = path
        with open_for_reading(path, ModelFormatError, "no such file", "a .safetensors file") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 8:
                raise ModelFormatError(f"{path}: truncated safetensors file ({size} bytes; expected at least an "
                                       f"8-byte header length)")
            (n,) = struct.unpack("<Q", f.read(8))
            if n > min(size - 8, MAX_HEADER):
                raise ModelFormatError(f"{path}: corrupt or truncated safetensors file: header length {n} but the "
                                       f"file has {size - 8} bytes after the length field")
            raw = f.read(n)
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size > 0 else None
        header = parse_json(raw, path, ModelFormatError, "corrupt safetensors header (not JSON)")
        if not isinstance(header, dict):
            raise ModelFormatError(f"{path}: corrupt safetensors header (expected a JSON object)")
        self.metadata = header.pop("__metadata__", None) or {}
        if not isinstance(self.metadata, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                          for k, v in self.metadata.items()):
            raise ModelFormatError(f"{path}: corrupt safetensors header: '__metadata__' must map strings to "
                                   f"strings, got {str(self.metadata)[:200]}")
        self._data0 = 8 + n
        data_len = size - self._data0
        self._entries: dict[str, tuple[np.dtype, tuple, int, int, str]] = {}
        for name, e in header.items():
            try:
                dt_name, shape, (b, end) = e["dtype"], e["shape"], e["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise ModelFormatError(f"{path}: tensor {name!r}: malformed header entry {e!r} (expected dtype, "
                                       f"shape, data_offsets)") from None
            # JSON integers only: a "2", 2.0 or true would be read as some size by int()
            if not isinstance(shape, list) or not all(_is_int(d) for d in shape):
                raise ModelFormatError(f"{path}: tensor {name!r}: shape {shape!r} is not a list of integers")
            if not (_is_int(b) and _is_int(end)):
                raise ModelFormatError(f"{path}: tensor {name!r}: data_offsets {[b, end]!r} are not integers")
            shape = tuple(shape)
            if dt_name not in DTYPES:
                raise ModelFormatError(f"{path}: tensor {name!r}: unsupported dtype {dt_name!r} (expected one of "
                                       f"{', '.join(DTYPES)})")
            dt = DTYPES[dt_name]
            if any(d < 0 for d in shape):
                raise ModelFormatError(f"{path}: tensor {name!r}: negative dimension in shape {list(shape)}")
            need = math.prod(shape) * dt.itemsize          # Python ints: a crafted shape cannot wrap around
            if not 0 <= b <= end or end - b != need:
                raise ModelFormatError(f"{path}: tensor {name!r}: data_offsets [{b}, {end}] hold {end - b} bytes, "
                                       f"expected {need} for {dt_name}{list(shape)}")
            if end > data_len:
                raise ModelFormatError(f"{path}: truncated: tensor {name!r} ends at byte {self._data0 + end} but "
                                       f"the file has {size} bytes")
            self._entries[name] = (dt, shape, b, end, dt_name)
        spans = sorted((b, end, name) for name, (_, _, b, end, _) in self._entries.items() if end > b)
        for (_, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
            if b1 < e0:              # the spec's buffers are disjoint; an overlap aliases two tensors' bytes
                raise ModelFormatError(f"{path}: tensors {n0!r} and {n1!r} overlap (data_offsets ending at {e0} "
                                       f"and starting at {b1})")

    @property
    def names(self) -> list[str]:
        return list(self._entries)

    def info(self, name: str) -> tuple[str, tuple]:
        dt, shape, _, _, dt_name = self._entries[name]
        return dt_name, shape

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def get(self, name: str) -> np.ndarray:
        if name not in self._entries:
            raise ModelFormatError(f"{self.path}: no tensor named {name!r}")
        dt, shape, b, end, dt_name = self._entries[name]
        n = (end - b) // dt.itemsize
        arr = np.frombuffer(self._map, dtype=dt, count=n, offset=self._data0 + b) if n else np.zeros(0, dt)
        arr = arr.reshape(shape)
        if dt_name == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        return arr


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    f = SafetensorsFile(path)
    return {n: f.get(n) for n in f.names}


def load(path: str, names=None) -> tuple[dict[str, np.ndarray], dict]:
    """(tensors as independent copies, metadata); ``names`` limits which tensors are read."""
    f = SafetensorsFile(path)
    return {n: np.array(f.get(n)) for n in f.names if names is None or n in names}, dict(f.metadata)


def write(f: BinaryIO, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
    """Writes the file's bytes to an open binary file object."""
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    arrays = []
    for name, a in tensors.items():
        a = np.ascontiguousarray(a)
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        if dt not in _NAMES:
            raise ModelFormatError(f"safetensors: tensor {name!r} has unsupported dtype {a.dtype}")
        a = a.astype(dt, copy=False)
        header[name] = {"dtype": _NAMES[dt], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        arrays.append(a)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    f.write(struct.pack("<Q", len(raw)))
    f.write(raw)
    for a in arrays:
        if a.size:
            f.write(memoryview(a).cast("B"))


def write_safetensors(path: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
    """Writes ``path`` atomically (see :mod:`orion.fileio`)."""
    with atomic_write(path) as f:
        write(f, tensors, metadata)
