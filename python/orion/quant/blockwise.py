"""Blockwise int4/int8 weights for ``constexpr_blockwise_shift_scale`` (iOS18).

Op (coremltools ``iOS18.compression.constexpr_blockwise_shift_scale``): ``y = scale * (data - offset)``
with ``scale``/``offset`` of the data's rank, each dim dividing the data's (block size = ratio).
Layout here: blocks of ``block_size`` along the input axis (dim 1) of one output channel: ``data``
``[out, in, ...]``, ``scale`` fp16 ``[out, in / block_size, 1, ...]``, ``offset`` (affine only) of
the same shape and of the data's dtype (int offsets keep ``data - offset`` exact).
Symmetric: int4 in [-7, 7] / int8 in [-127, 127], no offset. Affine: uint4 / uint8 with offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import QuantizationError
from ..native.convert import to_fp32
from .common import QuantizedTensor, as_fp16_weight, check_divides, covering_scale, expand_shape, shift_scale
from .packing import PackedInts

__all__ = ["BlockwiseQuantized", "quantize_blockwise"]


@dataclass(frozen=True, eq=False)
class BlockwiseQuantized(QuantizedTensor):
    """Operands of one ``constexpr_blockwise_shift_scale``."""

    op: ClassVar[str] = "constexpr_blockwise_shift_scale"
    data: PackedInts  #: int4/int8 (symmetric) or uint4/uint8 (affine), the weight's shape
    scale: np.ndarray  #: fp16, same rank as data, each dim dividing data's
    offset: PackedInts | None = None  #: the scale's shape and the data's dtype, or None

    def __post_init__(self):
        d = self.data
        ok = (self.scale.dtype == np.float16 and self.scale.ndim == len(d.shape)
              and all(s > 0 and n % s == 0 for n, s in zip(d.shape, self.scale.shape)))
        if not ok:
            raise QuantizationError(f"{self.op}: scale must be fp16 of rank {len(d.shape)} with dims dividing "
                                    f"{list(d.shape)}, got {self.scale.dtype} {list(self.scale.shape)}")
        if self.offset is not None and (self.offset.shape != self.scale.shape or self.offset.dtype != d.dtype):
            raise QuantizationError(f"{self.op}: offset must be {d.dtype} {list(self.scale.shape)}, got "
                                    f"{self.offset.dtype} {list(self.offset.shape)}")

    @property
    def shape(self) -> tuple:
        return self.data.shape

    @property
    def block_sizes(self) -> tuple:
        """Block size per dim (``data.shape[i] // scale.shape[i]``)."""
        return tuple(n // s for n, s in zip(self.shape, self.scale.shape))

    def operands(self) -> dict:
        """MIL parameter name -> (MIL dtype, shape, blob payload as 1-D uint8); no ``offset`` when None."""
        ops = {"data": (self.data.dtype, self.data.shape, self.data.payload),
               "scale": ("fp16", self.scale.shape, self.scale.view(np.uint8).reshape(-1))}
        if self.offset is not None:
            ops["offset"] = (self.offset.dtype, self.offset.shape, self.offset.payload)
        return ops

    def dequantize(self) -> np.ndarray:
        """The fp16 tensor the op produces (arithmetic: :func:`orion.quant.common.shift_scale`)."""
        off = None if self.offset is None else self.offset.unpack()
        return shift_scale(self.data.unpack(), self.scale, off)

    def expand_rank(self, rank: int) -> "BlockwiseQuantized":
        """The same weights with unit dims appended, e.g. linear ``[out, in]`` -> conv ``[out, in, 1, 1]``."""
        shape = expand_shape(self.shape, rank)
        sshape = expand_shape(self.scale.shape, rank)
        off = None if self.offset is None else self.offset.reshaped(sshape)
        return BlockwiseQuantized(self.data.reshaped(shape), self.scale.reshape(sshape), off)


def quantize_blockwise(w: np.ndarray, bits: int = 4, *, block_size: int = 32,
                       symmetric: bool = True) -> BlockwiseQuantized:
    """Quantize ``w`` (``[out, in, ...]``) in blocks of ``block_size`` input channels per output channel.

    ``bits`` is 4 or 8; ``block_size`` must divide ``in`` (dim 1). Scales are fp16 and rounded up when
    needed so that no weight is clipped: ``|dequantize() - fp16(w)| <= scale/2`` before the final fp16
    rounding of the product.
    """
    if isinstance(bits, bool) or bits not in (4, 8):
        raise QuantizationError(f"quantize_blockwise: bits must be 4 or 8, got {bits!r}")
    w16 = as_fp16_weight(w, "quantize_blockwise")
    out, n_in = w16.shape[0], w16.shape[1]
    bs = check_divides(n_in, block_size, "block_size", "quantize_blockwise")
    rest = w16.shape[2:]
    # fp32 division is exact enough for rint() (see quantize_int8)
    # [out, blocks, block, rest...] -> statistics over everything but (out, blocks)
    blocks = to_fp32(w16).reshape(out, n_in // bs, bs, -1)
    sshape = (out, n_in // bs) + (1,) * len(rest)
    if symmetric:
        top = (1 << (bits - 1)) - 1
        scale = covering_scale(np.abs(blocks).max(axis=(2, 3)), top)
        q = np.clip(np.rint(blocks / scale[:, :, None, None].astype(np.float32)), -top, top)
        data = PackedInts.pack(q.astype(np.int8).reshape(w16.shape), bits, signed=True)
        return BlockwiseQuantized(data, scale.reshape(sshape), None)
    top = (1 << bits) - 1
    lo = np.minimum(blocks.min(axis=(2, 3)).astype(np.float64), 0.0)  # span exact in fp64
    hi = np.maximum(blocks.max(axis=(2, 3)).astype(np.float64), 0.0)
    scale = covering_scale(hi - lo, top)
    s32 = scale.astype(np.float32)
    zp = np.clip(np.rint(-lo / s32), 0, top).astype(np.float32)
    q = np.clip(np.rint(blocks / s32[:, :, None, None]) + zp[:, :, None, None], 0, top)
    data = PackedInts.pack(q.astype(np.uint8).reshape(w16.shape), bits)
    offset = PackedInts.pack(zp.astype(np.uint8).reshape(sshape), bits)
    return BlockwiseQuantized(data, scale.reshape(sshape), offset)
