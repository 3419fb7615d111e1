"""fp32 <-> fp16 arrays through the native vectorised converter: round to nearest even, overflow to inf - the
same bits as numpy's casts (tests/native/test_kernels.py holds every ISA to them), which numpy computes element by
element (~1.8 ns an element for fp32 -> fp16 here: 1.6 ms of a 1536 x 576 weight's 2 ms dequantization)."""

from __future__ import annotations

import numpy as np

from .. import _native

_SMALL = 4096          # below this many elements a native call costs more than numpy's cast


def to_fp16(arr) -> np.ndarray:
    """``arr`` as a C-contiguous fp16 array; floats of other widths are first made fp32 (as the runtime gets
    them). A transposed (Fortran-ordered) array converts its contiguous base and transposes the halved bytes."""
    arr = np.asarray(arr)
    if arr.dtype == np.float16:
        return np.ascontiguousarray(arr)
    if arr.size < _SMALL:
        with np.errstate(over="ignore", invalid="ignore"):
            return np.ascontiguousarray(arr.astype(np.float16))
    if not arr.flags.c_contiguous and arr.flags.f_contiguous:
        return np.ascontiguousarray(_native.convert_fp(np.ascontiguousarray(arr.T, dtype=np.float32)).T)
    return _native.convert_fp(np.ascontiguousarray(arr, dtype=np.float32))


def to_fp32(arr) -> np.ndarray:
    """``arr`` as fp32 values (exact from fp16)."""
    arr = np.asarray(arr)
    if arr.dtype == np.float16 and arr.flags.c_contiguous and arr.size >= _SMALL:
        return _native.convert_fp(arr)
    return np.asarray(arr, np.float32)
