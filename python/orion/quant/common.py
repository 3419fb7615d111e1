"""What every quantizer shares: input checks, fp16 rounding of scales, and the one scale/shift arithmetic.

Every quantizer first rounds the weight to fp16 (the precision the model runs in), so quantizing the
fp32 checkpoint and the fp16 cache gives the same arrays.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..errors import QuantizationError
from ..native.convert import codes_to_fp16, to_fp16

__all__ = ["QuantizedTensor", "as_fp16_weight", "check_divides", "expand_shape", "covering_scale", "shift_scale",
           "row_block_grid"]

_FP16_MAX = float(np.finfo(np.float16).max)


class QuantizedTensor:
    """Base of the quantizers' results: the operands of one MIL constexpr op (``op``) for one weight.

    Subclasses give ``shape`` (the dense weight's), ``operands()`` (MIL parameter name -> (MIL dtype,
    shape, blob payload as 1-D uint8)), ``dequantize()`` (the op's fp16 result) and ``expand_rank()``.
    """

    op: ClassVar[str]

    @property
    def nbytes(self) -> int:
        """Blob payload bytes of all operands, sub-byte packing included (no 64-byte blob records)."""
        return sum(p.size for _, _, p in self.operands().values())

    def operands(self) -> dict:
        raise NotImplementedError

    def dequantize(self) -> np.ndarray:
        raise NotImplementedError


def as_fp16_weight(w, where: str, min_rank: int = 2) -> np.ndarray:
    """``w`` as a C-contiguous fp16 array; raises :class:`QuantizationError` for non-float, low-rank,
    empty or non-finite input (values beyond the fp16 range included)."""
    if not isinstance(w, np.ndarray):
        raise QuantizationError(f"{where}: weights must be a numpy array, got {type(w).__name__}")
    if w.dtype not in (np.float16, np.float32, np.float64):
        raise QuantizationError(f"{where}: weights must be float16, float32 or float64, got {w.dtype}; "
                                f"cast them to a float type first")
    if w.ndim < min_rank or w.size == 0:
        raise QuantizationError(f"{where}: weights must have rank >= {min_rank} [out, in, ...] and no empty "
                                f"dimension, got shape {list(w.shape)}")
    with np.errstate(over="ignore"):
        w16 = np.ascontiguousarray(w, dtype=np.float16)
    # exponent bits all set: inf or nan (an integer test; np.isfinite is slow on fp16)
    bad = (w16.view(np.uint16) & 0x7C00) == 0x7C00
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        if np.isfinite(w[i]):
            raise QuantizationError(f"{where}: weights reach |w| = {float(abs(w[i])):g} at index {list(i)}, beyond "
                                    f"the fp16 range ({_FP16_MAX:g}); they cannot run on the ANE as they are")
        raise QuantizationError(f"{where}: weights hold a non-finite value at index {list(i)}; fix the checkpoint")
    return w16


def check_divides(size: int, part, what: str, where: str) -> int:
    """``part`` as int when it is a positive divisor of ``size``; raises otherwise."""
    if isinstance(part, bool) or not isinstance(part, (int, np.integer)) or part <= 0:
        raise QuantizationError(f"{where}: {what} must be a positive int, got {part!r}")
    if size % int(part):
        raise QuantizationError(f"{where}: {what} {int(part)} does not divide the dimension {size}; "
                                f"choose a divisor of {size}")
    return int(part)


def covering_scale(span: np.ndarray, steps: int) -> np.ndarray:
    """The smallest fp16 ``s`` with ``s * steps >= span`` (elementwise), near ``span / steps``.

    Rounding ``span / steps`` to fp16 can land one ulp below; bumping it keeps every weight inside the
    integer grid, so the rounding error stays <= s/2 (no clipping). Zero spans get ``s = 1``.
    """
    span = np.asarray(span, np.float64)
    s = (span / steps).astype(np.float16)
    low = s.astype(np.float64) * steps < span
    s = np.where(low, np.nextafter(s, np.float16(np.inf)), s)
    return np.where(span > 0, s, np.float16(1.0)).astype(np.float16)


def shift_scale(q: np.ndarray, scale: np.ndarray, offset: np.ndarray | None) -> np.ndarray:
    """``fp16(scale * (q - offset))`` with ``scale`` and ``offset`` as block grids: of ``q``'s rank, each dim
    dividing ``q``'s (a dim of 1 spans the whole dim, as the constexpr ops' ``scale`` / ``offset`` are shaped).

    The arithmetic of ``constexpr_affine_dequantize`` and ``constexpr_blockwise_shift_scale`` as
    coremltools evaluates them (``optimize._utils.dequantize_by_scale_and_zp``: fp32; iOS18 ``decompress``:
    fp16): ``q - offset`` is an exact integer (|.| <= 255) and its product with an fp16 scale needs at
    most 9 + 11 significant bits, so it is exact in fp32 and the result is that exact product rounded
    once to fp16 (round to nearest even) - the same bits either way. This is the reference the
    simulator's dequantizing kernels must equal. Grids of blocks of rows x runs of at least 16 elements of a row
    (:func:`row_block_grid`: every weight orion quantizes) decode natively in one threaded pass (10x numpy's
    four; a 1B model's load decodes each weight several times); others through numpy.
    """
    scale = _full_rank(np.asarray(scale), q.ndim)
    offset = None if offset is None else _full_rank(np.asarray(offset), q.ndim)
    grid = row_block_grid(q.shape, scale.shape)
    if (grid is not None and q.dtype in (np.int8, np.uint8) and (offset is None or offset.shape == scale.shape)
            and int(np.prod(q.shape[1:])) // grid[1] >= _MIN_RUN):
        return codes_to_fp16(q, scale, offset, *grid)
    scale, offset = _spread(scale, q.shape), None if offset is None else _spread(offset, q.shape)
    d = q.astype(np.float32)
    if offset is not None:
        d = d - offset.astype(np.float32)
    return to_fp16(d * scale.astype(np.float32))


def row_block_grid(shape: tuple, blocks: tuple) -> tuple[int, int] | None:
    """(rows per block, blocks per row) of a parameter grid ``blocks`` (blocks per dim, each dividing ``shape``'s)
    over a weight of ``shape`` seen as [shape[0], the rest]: blocks along dim 0 and along at most one other dim with
    unit dims before it, so that each block of a row is a run of consecutive elements (the native kernels' 2-D
    blocks: the dense decodes here, the CompressedWeight of a streamed layer, ``sim/ops/constexpr.cpp``); None
    otherwise."""
    if len(blocks) != len(shape) or not shape or 0 in shape or any(g < 1 or n % g for n, g in zip(shape, blocks)):
        return None
    varying = [i for i in range(1, len(shape)) if blocks[i] > 1]
    if len(varying) > 1 or (varying and any(shape[i] != 1 for i in range(1, varying[0]))):
        return None
    return shape[0] // blocks[0], blocks[varying[0]] if varying else 1


_MIN_RUN = 16          # a block's run of a row below this decodes faster through numpy than a native call a run


def _full_rank(v: np.ndarray, rank: int) -> np.ndarray:
    """A grid of lower rank than its codes broadcasts from the right, as numpy would: leading dims of 1."""
    return v.reshape((1,) * (rank - v.ndim) + v.shape) if v.ndim < rank else v


def _spread(v: np.ndarray, shape: tuple) -> np.ndarray:
    """A block grid repeated along the dims whose blocks span several elements (dims of 1 broadcast)."""
    for axis, (n, g) in enumerate(zip(shape, v.shape)):
        if 1 < g < n:
            v = np.repeat(v, n // g, axis)
    return v


def expand_shape(shape: tuple, rank: int) -> tuple:
    """``shape`` with unit dims appended up to ``rank`` (linear ``[out, in]`` -> conv ``[out, in, 1, 1]``)."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < len(shape):
        raise QuantizationError(f"cannot expand shape {list(shape)} to rank {rank!r}: rank must be an int "
                                f">= {len(shape)}")
    return tuple(shape) + (1,) * (rank - len(shape))
