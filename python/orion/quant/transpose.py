"""A compressed weight transposed: the same values in ``w.transpose(perm)`` order, still compressed (the
codes repacked, tables / scales following their axes), so a graph that uses ``Wᵀ`` (a backward program)
keeps the constexpr op instead of a dense copy."""

from __future__ import annotations

import numpy as np

from ..errors import QuantizationError
from .blockwise import BlockwiseQuantized
from .int8 import AffineQuantized
from .packing import PackedInts
from .palettize import LutQuantized

__all__ = ["transpose_quantized"]


def _codes(p: PackedInts, perm) -> PackedInts:
    return PackedInts.pack(p.unpack().transpose(perm), p.bits, p.signed)


def transpose_quantized(q, perm):
    """``q`` with its dims permuted by ``perm``; ``q.transpose(perm).dequantize() == q.dequantize().transpose(perm)``."""
    perm = tuple(int(a) for a in perm)
    if sorted(perm) != list(range(len(q.shape))):
        raise QuantizationError(f"perm {list(perm)} is not a permutation of the {len(q.shape)} dims of {list(q.shape)}")
    if isinstance(q, AffineQuantized):
        return AffineQuantized(_codes(q.quantized_data, perm), q.scale, q.zero_point, perm.index(q.axis))
    if isinstance(q, LutQuantized):
        r = len(perm)
        return LutQuantized(_codes(q.indices, perm), np.ascontiguousarray(q.lut.transpose(perm + (r, r + 1))))
    if isinstance(q, BlockwiseQuantized):
        off = None if q.offset is None else _codes(q.offset, perm)
        return BlockwiseQuantized(_codes(q.data, perm), np.ascontiguousarray(q.scale.transpose(perm)), off)
    raise QuantizationError(f"cannot transpose a {type(q).__name__}")
