"""Minimal safetensors reader/writer over numpy (no dependency on the ``safetensors`` package).

Layout: u64 little-endian header length N, N bytes of JSON ``{name: {dtype, shape, data_offsets},
"__metadata__": {str: str}}`` (padded with spaces to a multiple of 8), then the raw little-endian data.
"""

from __future__ import annotations

import json
import os
import struct
from typing import Mapping

import numpy as np

from .errors import CheckpointError

_DT = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": None, "I64": np.int64, "I32": np.int32,
       "I16": np.int16, "U16": np.uint16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAME = {np.dtype(v): k for k, v in _DT.items() if v is not None}


def encode_header(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> tuple[bytes, list]:
    header: dict = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    off = 0
    order = []
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        dt = _NAME.get(arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype)
        if dt is None:
            raise CheckpointError(f"safetensors: cannot store {name!r} of dtype {arr.dtype}")
        n = arr.nbytes
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + n]}
        order.append((name, arr))
        off += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw, order


def write(f, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
    """Write to an open binary file object."""
    head, order = encode_header(tensors, metadata)
    f.write(head)
    for _, arr in order:
        f.write(np.ascontiguousarray(arr).astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())


def save(path: str | os.PathLike, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None) -> None:
    with open(path, "wb") as f:
        write(f, tensors, metadata)


def read_header(path: str | os.PathLike) -> tuple[dict, int]:
    """(header dict, data start offset); raises CheckpointError when the file is not safetensors."""
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            first = f.read(8)
            if len(first) < 8:
                raise CheckpointError(f"{path}: truncated safetensors file ({size} bytes)")
            (n,) = struct.unpack("<Q", first)
            if n > min(size - 8, 100 << 20):
                raise CheckpointError(f"{path}: not a safetensors file (header length {n} > file size {size})")
            header = json.loads(f.read(n))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{path}: corrupt safetensors header ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors header (not a JSON object)")
    start = 8 + n
    end = max([v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"] or [0])
    if start + end > size:
        raise CheckpointError(f"{path}: truncated safetensors file (needs {start + end} bytes, has {size})")
    return header, start


def load(path: str | os.PathLike, names=None) -> tuple[dict[str, np.ndarray], dict]:
    """All tensors (copies, native dtype) and the metadata dict."""
    header, start = read_header(path)
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    try:
        for name, info in header.items():
            if names is not None and name not in names:
                continue
            dt = _DT.get(info.get("dtype"))
            if dt is None:
                raise CheckpointError(f"{path}: tensor {name!r} has unsupported dtype {info.get('dtype')!r}")
            b, e = info["data_offsets"]
            shape = tuple(int(s) for s in info["shape"])
            if (e - b) != int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize:
                raise CheckpointError(f"{path}: tensor {name!r} size does not match its shape {list(shape)}")
            out[name] = np.frombuffer(mm[start + b:start + e].tobytes(), dtype=np.dtype(dt).newbyteorder("<")
                                      ).astype(dt, copy=False).reshape(shape)
    finally:
        del mm
    return out, meta
