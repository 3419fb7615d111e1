"""k-means palettization for ``constexpr_lut_to_dense`` (iOS18 form, scalar LUTs).

Op (coremltools ``iOS18.compression.constexpr_lut_to_dense``): ``indices`` uint{1,2,3,4,6,8} of the
weight's shape, ``lut`` of rank ``indices.rank + 2`` shaped ``[G, 1, ..., 1, 2**bits, 1]``: dim 0 of
the indices is split into ``G`` groups of ``group_size`` output channels, each with its own table;
the last dim (VECTOR_SIZE) is 1, so there is no ``vector_axis``. Output = the LUT entry, no arithmetic:
``y[i, ...] = lut[i // group_size, 0, ..., indices[i, ...], 0]`` in the LUT's dtype (fp16). A per-tensor
LUT also has the iOS16 form (``ios16_operands``): the same packed index bytes as a uint8 vector.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..errors import QuantizationError
from ..native.convert import lut_to_fp16
from .common import QuantizedTensor, as_fp16_weight, check_divides, expand_shape
from .kmeans import fp16_histogram, kmeans_1d, nearest_sorted
from .packing import PackedInts, checked_payload, mil_int_dtype

__all__ = ["LutQuantized", "palettize"]


@dataclass(frozen=True, eq=False)
class LutQuantized(QuantizedTensor):
    """Operands of one ``constexpr_lut_to_dense`` (iOS18, VECTOR_SIZE 1)."""

    op: ClassVar[str] = "constexpr_lut_to_dense"
    indices: PackedInts  #: uint{bits}, the weight's shape
    lut: np.ndarray  #: fp16 [G, 1, ..., 1, 2**bits, 1], rank indices.rank + 2; each table ascending

    def __post_init__(self):
        ix = self.indices
        if ix.signed:
            raise QuantizationError(f"{self.op}: indices must be unsigned, got {ix.dtype}")
        k = 1 << ix.bits
        want_rank = len(ix.shape) + 2
        # one table per block: lut dim i (< rank) = number of blocks along indices dim i (dividing it)
        ok = (self.lut.dtype == np.float16 and self.lut.ndim == want_rank and self.lut.shape[-2:] == (k, 1)
              and all(g > 0 and n % g == 0 for n, g in zip(ix.shape, self.lut.shape[:-2])))
        if not ok:
            want = ", ".join(["G"] + ["1"] * (want_rank - 3) + [str(k), "1"])
            raise QuantizationError(f"{self.op}: lut must be fp16 [{want}] with G dividing {ix.shape[0]} (or blocks "
                                    f"dividing each dim), got {self.lut.dtype} {list(self.lut.shape)}")

    @property
    def shape(self) -> tuple:
        return self.indices.shape

    @property
    def bits(self) -> int:
        return self.indices.bits

    @property
    def group_size(self) -> int:
        """Output channels (dim 0) sharing one table; ``shape[0]`` for a per-tensor LUT."""
        return self.shape[0] // self.lut.shape[0]

    def operands(self) -> dict:
        """MIL parameter name -> (MIL dtype, shape, blob payload as 1-D uint8)."""
        ix = self.indices
        return {"indices": (ix.dtype, ix.shape, ix.payload),
                "lut": ("fp16", self.lut.shape, self.lut.view(np.uint8).reshape(-1))}

    def ios16_operands(self) -> dict:
        """The iOS16 form of the op (ios16 / ``program(1.0)`` dialect): ``indices`` uint8 [M] = the same
        packed bytes, ``lut`` [2**bits], ``shape`` uint32. Per-tensor LUTs of 1/2/4/6/8 bits only."""
        if self.lut.size != 1 << self.bits or self.bits == 3:
            raise QuantizationError(f"the iOS16 {self.op} takes one table of 2, 4, 16, 64 or 256 entries; this "
                                    f"weight has {self.lut.shape[0]} tables of {1 << self.bits}: use the iOS18 form")
        ix = self.indices
        shape = np.asarray(ix.shape, np.uint32)
        return {"indices": ("uint8", (ix.nbytes,), ix.payload),
                "lut": ("fp16", (1 << self.bits,), self.lut.view(np.uint8).reshape(-1)),
                "shape": ("uint32", shape.shape, shape.view(np.uint8).reshape(-1))}

    def dequantize(self) -> np.ndarray:
        """The fp16 tensor the op produces: a pure table lookup."""
        groups = self.lut.shape[:-2]
        if any(g != 1 for g in groups[1:]):  # blocks along other dims (a transposed weight): block index per element
            idx = self.indices.unpack()
            grids = np.ix_(*[np.arange(n) // (n // g) for n, g in zip(self.shape, groups)])
            block = np.ravel_multi_index(np.broadcast_arrays(*grids), groups)
            return self.lut.reshape(-1, 1 << self.bits)[block, idx]
        tables = self.lut.reshape(self.lut.shape[0], -1)  # [G, 2**bits]
        rows, size = self.shape[0], int(np.prod(self.shape))
        if size == 0:
            return np.zeros(self.shape, np.float16)
        packed = checked_payload(self.indices.payload, self.bits, size)
        return lut_to_fp16(packed, self.bits, rows, size // rows, tables, self.group_size).reshape(self.shape)

    def expand_rank(self, rank: int) -> "LutQuantized":
        """The same weights with unit dims appended, e.g. linear ``[out, in]`` -> conv ``[out, in, 1, 1]``."""
        shape = expand_shape(self.shape, rank)
        lut = self.lut.reshape(self.lut.shape[:-2] + (1,) * (rank - len(self.shape)) + self.lut.shape[-2:])
        return LutQuantized(self.indices.reshaped(shape), lut)


def palettize(w: np.ndarray, bits: int, *, group_size: int | None = None, seed=0,
              max_iter: int = 50) -> LutQuantized:
    """Palettize ``w`` (``[out, in, ...]``) with a ``2**bits``-entry k-means LUT.

    ``group_size=None``: one table for the tensor; otherwise one table per ``group_size`` consecutive
    output channels (must divide ``out``). Deterministic for a given ``seed`` (an int or a sequence of
    ints, as ``numpy.random.default_rng`` takes; k-means++ seeding, at
    most ``max_iter`` Lloyd steps per table; tables are computed on the fp16 histogram, see
    :mod:`orion.quant.kmeans`). Each table is sorted ascending and stored as fp16; every weight gets
    the index of its nearest fp16 entry.
    """
    mil_int_dtype(bits, signed=False)
    w16 = as_fp16_weight(w, "palettize")
    out = w16.shape[0]
    gs = out if group_size is None else check_divides(out, group_size, "group_size", "palettize")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 0:
        raise QuantizationError(f"palettize: max_iter must be an int >= 0, got {max_iter!r}")
    k = 1 << int(bits)
    try:
        rng = np.random.default_rng(seed)
    except (TypeError, ValueError) as e:
        raise QuantizationError(f"palettize: seed must be a non-negative int or sequence of them, got "
                                f"{seed!r} ({e})") from None
    groups = w16.reshape(out // gs, -1)
    tables = np.empty((groups.shape[0], k), np.float16)
    idx = np.empty(groups.shape, np.uint8)
    for g in range(groups.shape[0]):
        values, counts = fp16_histogram(groups[g])
        table = np.sort(kmeans_1d(values, counts, k, rng, max_iter).astype(np.float16))
        tables[g] = table
        # index per distinct value, then gathered per element through the fp16 codes
        code_to_idx = np.zeros(1 << 16, np.uint8)
        code_to_idx[values.astype(np.float16).view(np.uint16)] = nearest_sorted(table, values)
        idx[g] = code_to_idx[groups[g].view(np.uint16)]
    lut = tables.reshape((tables.shape[0],) + (1,) * (w16.ndim - 1) + (k, 1))
    return LutQuantized(PackedInts.pack(idx.reshape(w16.shape), int(bits)), lut)
