"""fp32 <-> fp16 arrays through the native vectorised converter: round to nearest even, overflow to inf - the
same bits as numpy's casts (tests/native/test_kernels.py holds every ISA to them), which numpy computes element by
element (~1.8 ns an element for fp32 -> fp16 here: 1.6 ms of a 1536 x 576 weight's 2 ms dequantization); and
integer codes with a scale / offset per block (:func:`codes_to_fp16`) or packed codes into tables (:func:`lut_to_fp16`)
to fp16, in one threaded pass each; and fp16 rows to symmetric 8-bit codes (:func:`row_absmax`,
:func:`fp16_to_codes`)."""

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


def codes_to_fp16(codes: np.ndarray, scale: np.ndarray, offset: np.ndarray | None, rows_per_block: int,
                  blocks_per_row: int) -> np.ndarray:
    """``fp16(float32(code - offset) * scale)`` of int8 / uint8 ``codes`` ``[M, ...]`` (rows of ``K`` = size / M),
    with ``scale`` and ``offset`` (or None: 0) given per block of ``rows_per_block`` rows x ``K / blocks_per_row``
    consecutive columns, ``[M / rows_per_block, blocks_per_row]`` in any shape of that size: the constexpr
    shift/scale ops' values (:func:`orion.quant.common.shift_scale` says why fp32 gives them exactly)."""
    scale = np.ascontiguousarray(scale, np.float32).reshape(-1)
    offset = _EMPTY32 if offset is None else np.ascontiguousarray(offset, np.float32).reshape(-1)
    return _native.shift_scale_f16(np.ascontiguousarray(codes), scale, offset, int(rows_per_block),
                                   int(blocks_per_row))


def lut_to_fp16(packed: np.ndarray, bits: int, rows: int, cols: int, tables: np.ndarray,
                rows_per_table: int) -> np.ndarray:
    """fp16 ``[rows, cols]``: ``tables[r // rows_per_table][code]`` of ``bits``-wide codes packed LSB-first in one
    row-major stream (``packed``: MILBlob's bytes) with ``tables`` fp16 ``[rows / rows_per_table, 2**bits]``: the
    values of ``constexpr_lut_to_dense``."""
    return _native.lut_f16(np.ascontiguousarray(packed, np.uint8).reshape(-1), int(bits), int(rows), int(cols),
                           np.ascontiguousarray(tables, np.float16).reshape(-1), int(rows_per_table))


def row_absmax(rows: np.ndarray) -> np.ndarray:
    """max |x| of each row of fp16 ``rows`` ``[n, d]`` as float32 ``[n]`` (exact; NaN for a row holding one)."""
    return _native.absmax_rows_f16(np.ascontiguousarray(rows, np.float16))


def fp16_to_codes(rows: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8 ``[n, d]``: ``clip(rint(float32(x) / float32(scale[r])), -127, 127)`` of fp16 ``rows`` (positive finite
    scales, one a row): :func:`orion.quant.quantize_int8`'s symmetric codes."""
    return _native.quantize_rows_s8(np.ascontiguousarray(rows, np.float16),
                                    np.ascontiguousarray(scale, np.float32).reshape(-1))


_EMPTY32 = np.zeros(0, np.float32)
