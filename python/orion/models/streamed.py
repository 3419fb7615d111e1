"""Compressed layer weights streamed into a shared program: instead of an fp16 copy of every layer's weights in
surfaces of its own (what a program that takes its weights as inputs reads), a layer keeps its weights as stored -
int8 codes and scales, LUT indices and tables - in the simulator kernels' compressed form. On the simulator a
layer binds a surface whose panels stand for its weight inputs' bytes (``Surface.set_panels``): the program's
panel GEMMs read the compressed weights themselves, a panel at a time (int8 codes straight into the GEMV's
registers), and the surface's pages are never written. Where a program reads an input any other way (a padded
input's copy, the ANE), each of the layer's turns first decodes the weights into the program's own weight surfaces
instead (:class:`orion.models.stages.LayerStage`, and the step chain) - one decode of the layer per eval, which
decode's one column feels and prefill's many columns amortise. The values are exactly the fp16 values the
constexpr op gives (checked against the staged ones at capture), so outputs are bit-identical to per-layer
surfaces either way.

:func:`native_weight` turns a :class:`~orion.quant.QuantizedArray` into that form (``_native.CompressedWeight``),
or None when its parameter grid has none (blocks varying along two dims besides the first)."""

from __future__ import annotations

import math

import numpy as np

from .. import _native
from ..quant import QuantizedArray
from ..quant.blockwise import BlockwiseQuantized
from ..quant.common import row_block_grid
from ..quant.int8 import AffineQuantized
from ..quant.palettize import LutQuantized

__all__ = ["native_weight"]

_EMPTY16 = np.zeros(0, np.float16)
_EMPTY32 = np.zeros(0, np.float32)


def native_weight(a) -> object | None:
    """``a`` (a QuantizedArray of an int8 / LUT / blockwise weight) as a ``_native.CompressedWeight``, or None."""
    if not isinstance(a, QuantizedArray):
        return None
    q = a.quant
    shape = tuple(int(d) for d in q.shape)
    M, K = shape[0], math.prod(shape[1:]) if len(shape) > 1 else 1
    if isinstance(q, AffineQuantized):
        blocks = tuple(q.scale.size if i == q.axis else 1 for i in range(len(shape)))
        codes, bits, signed = q.quantized_data.unpack(), 8, q.quantized_data.signed
        lut, scale, offset = _EMPTY16, q.scale.astype(np.float32), q.zero_point.astype(np.float32)
        kind = "shift_scale"
    elif isinstance(q, LutQuantized):
        blocks = tuple(int(g) for g in q.lut.shape[:len(shape)])
        codes, bits, signed = q.indices.unpack(), q.indices.bits, False
        lut, scale, offset = np.ascontiguousarray(q.lut.reshape(-1)), _EMPTY32, _EMPTY32
        kind = "lut"
    elif isinstance(q, BlockwiseQuantized):
        blocks = tuple(int(s) for s in q.scale.shape)
        codes, bits, signed = q.data.unpack(), q.data.bits, q.data.signed
        offset = _EMPTY32 if q.offset is None else q.offset.unpack().astype(np.float32).reshape(-1)
        lut, scale, kind = _EMPTY16, q.scale.astype(np.float32).reshape(-1), "shift_scale"
    else:
        return None
    grid = row_block_grid(shape, blocks)
    if grid is None:
        return None
    codes = np.ascontiguousarray(codes).view(np.uint8).reshape(-1)      # two's complement bytes when signed
    return _native.compressed_weight(kind, codes, M, K, bits, signed, grid[0], grid[1], lut,
                                     np.ascontiguousarray(scale), np.ascontiguousarray(offset))
