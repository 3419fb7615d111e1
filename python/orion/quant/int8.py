"""Per-output-channel 8-bit weights for ``constexpr_affine_dequantize`` (iOS16, also in ios18 programs).

Op: ``y = scale * (quantized_data - zero_point)`` with ``scale``/``zero_point`` vectors along ``axis``
(coremltools ``iOS16.constexpr_ops.constexpr_affine_dequantize``). Layout here: ``quantized_data``
int8 (symmetric) or uint8 (affine) in the weight's shape, ``scale`` fp16 ``[out]``, ``zero_point``
``[out]`` of the data's dtype, ``axis = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import QuantizationError
from ..native.convert import fp16_to_codes, row_absmax, to_fp32
from .common import QuantizedTensor, as_fp16_weight, covering_scale, expand_shape, shift_scale
from .packing import PackedInts

__all__ = ["AffineQuantized", "quantize_int8"]


@dataclass(frozen=True, eq=False)
class AffineQuantized(QuantizedTensor):
    """Operands of one ``constexpr_affine_dequantize``."""

    op: ClassVar[str] = "constexpr_affine_dequantize"
    quantized_data: PackedInts  #: int8 or uint8, the weight's shape
    scale: np.ndarray  #: fp16 [shape[axis]]
    zero_point: np.ndarray  #: int8/uint8 (the data's dtype) [shape[axis]]; zeros when symmetric
    axis: int = 0

    def __post_init__(self):
        d = self.quantized_data
        if d.bits != 8:
            raise QuantizationError(f"{self.op}: quantized_data must be int8 or uint8, got {d.dtype}")
        n = d.shape[self.axis]
        if self.scale.dtype != np.float16 or self.scale.shape != (n,):
            raise QuantizationError(f"{self.op}: scale must be fp16 [{n}], got {self.scale.dtype} "
                                    f"{list(self.scale.shape)}")
        want = np.int8 if d.signed else np.uint8
        if self.zero_point.dtype != want or self.zero_point.shape != (n,):
            raise QuantizationError(f"{self.op}: zero_point must be {np.dtype(want)} [{n}], got "
                                    f"{self.zero_point.dtype} {list(self.zero_point.shape)}")

    @property
    def shape(self) -> tuple:
        return self.quantized_data.shape

    def operands(self) -> dict:
        """MIL parameter name -> (MIL dtype, shape, blob payload as 1-D uint8)."""
        d = self.quantized_data
        return {"quantized_data": (d.dtype, d.shape, d.payload),
                "scale": ("fp16", self.scale.shape, self.scale.view(np.uint8).reshape(-1)),
                "zero_point": (d.dtype, self.zero_point.shape, self.zero_point.view(np.uint8).reshape(-1))}

    def _bcast(self, v: np.ndarray) -> np.ndarray:
        shape = [1] * len(self.shape)
        shape[self.axis] = v.size
        return v.reshape(shape)

    def dequantize(self) -> np.ndarray:
        """The fp16 tensor the op produces (arithmetic: :func:`orion.quant.common.shift_scale`)."""
        return shift_scale(self.quantized_data.unpack(), self._bcast(self.scale), self._bcast(self.zero_point))

    def expand_rank(self, rank: int) -> "AffineQuantized":
        """The same weights with unit dims appended, e.g. linear ``[out, in]`` -> conv ``[out, in, 1, 1]``."""
        shape = expand_shape(self.shape, rank)
        return AffineQuantized(self.quantized_data.reshaped(shape), self.scale, self.zero_point, self.axis)


def symmetric_row_scales(rows: np.ndarray) -> np.ndarray:
    """The fp16 scale of each row of fp16 ``rows`` ``[n, K]`` that symmetric :func:`quantize_int8` gives it:
    ``max|row| / 127``, rounded up where fp16 rounding would clip (the CPU classifier computes them a block of rows
    ahead of the codes: models/classifier.py)."""
    return covering_scale(row_absmax(rows), 127)


def quantize_int8(w: np.ndarray, *, symmetric: bool = True) -> AffineQuantized:
    """Quantize ``w`` (``[out, in, ...]``) per output channel (axis 0) to 8 bits.

    Symmetric: int8 in [-127, 127], ``scale = max|w| / 127``, zero_point 0. Affine: uint8 in [0, 255]
    over ``[min(w, 0), max(w, 0)]``, zero_point ``round(-min / scale)``. Scales are fp16, rounded up
    when needed so that no weight is clipped: ``|dequantize() - fp16(w)| <= scale/2`` before the final
    fp16 rounding of the product.
    """
    w16 = as_fp16_weight(w, "quantize_int8")
    # fp32 division is enough: a quotient of two fp16 values is never within half an fp32 ulp of a
    # rounding tie unless it is exactly one, so rint() gives what exact arithmetic gives.
    if symmetric:
        rows16 = w16.reshape(w16.shape[0], -1)
        scale = symmetric_row_scales(rows16)
        zp = np.zeros(rows16.shape[0], np.int8)
        q = fp16_to_codes(rows16, scale)                   # clip(rint(float32(w) / scale), -127, 127), natively
    else:
        rows = to_fp32(w16.reshape(w16.shape[0], -1))      # numpy widens fp16 element by element
        lo = np.minimum(rows.min(axis=1).astype(np.float64), 0.0)  # span exact in fp64
        hi = np.maximum(rows.max(axis=1).astype(np.float64), 0.0)
        scale = covering_scale(hi - lo, 255)
        s32 = scale.astype(np.float32)
        zp = np.clip(np.rint(-lo / s32), 0, 255).astype(np.float32)
        q = np.clip(np.rint(rows / s32[:, None]) + zp[:, None], 0, 255).astype(np.uint8)
        zp = zp.astype(np.uint8)
    packed = PackedInts.pack(q.reshape(w16.shape), 8, signed=symmetric)
    return AffineQuantized(packed, scale, zp, 0)
