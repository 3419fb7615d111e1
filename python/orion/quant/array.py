"""A model weight that is compressed: :class:`QuantizedArray` holds only ``quant`` (the constexpr op's
operands, as stored) and reads as the fp16 values that op produces (``quant.dequantize()``), decoded at
each use and dropped after it - so every numpy consumer (references, the fp16 probe, LoRA merges) computes
with exactly what the programs compute, while the host keeps the weight at its compressed size (a dense
fp16 copy per weight made int8 models larger in memory than fp16 ones). ``Graph.weight`` turns ``quant``
into the constexpr op. Indexing, transposes and arithmetic give plain fp16 values: only the weight as
quantized is compressed."""

from __future__ import annotations

import numpy as np

from ..native.convert import to_fp32
from .common import QuantizedTensor

__all__ = ["QuantizedArray"]


class QuantizedArray(np.lib.mixins.NDArrayOperatorsMixin):
    """A compressed weight: ``quant`` (a :class:`QuantizedTensor`) read as its fp16 values by numpy
    (``np.asarray(a)``, ``a @ x``, ``a[i]``, ``a.T``). ``nbytes`` is what it holds: the compressed operands."""

    __slots__ = ("quant",)

    def __init__(self, q: QuantizedTensor):
        self.quant = q

    @property
    def shape(self) -> tuple:
        return tuple(self.quant.shape)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float16)

    @property
    def ndim(self) -> int:
        return len(self.quant.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.quant.shape))

    @property
    def nbytes(self) -> int:
        return int(self.quant.nbytes)

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype=None, copy=None):
        if copy is False:
            raise ValueError("a QuantizedArray is decoded at each use: it has no fp16 buffer to view without a copy")
        a = self.quant.dequantize()
        if dtype is None or np.dtype(dtype) == np.float16:
            return a
        if np.dtype(dtype) == np.float32:     # 1.5x numpy's cast (numpy's to float64, the probe's, is the faster)
            return to_fp32(a)
        return a.astype(dtype)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(np.asarray(x) if isinstance(x, QuantizedArray) else x for x in inputs)
        return getattr(ufunc, method)(*inputs, **kwargs)

    def __getitem__(self, key):
        return np.asarray(self)[key]

    @property
    def T(self) -> np.ndarray:
        return np.asarray(self).T

    def astype(self, dtype, copy: bool = True) -> np.ndarray:
        return np.asarray(self, dtype)

    def __reduce__(self):             # pickles (and copies) as the plain fp16 values
        return np.asarray(self).__reduce__()

    def __repr__(self) -> str:
        return f"QuantizedArray({self.quant.op}, shape={list(self.shape)}, {self.nbytes} bytes)"
