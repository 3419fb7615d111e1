"""A model weight that is compressed: :class:`QuantizedArray` holds the fp16 values its constexpr op produces
(``quant.dequantize()``), so every numpy consumer (references, norms probes, LoRA merges) computes with
exactly what the programs compute, and remembers ``quant``, which ``Graph.weight`` turns into the
constexpr op. Slices, transposes and arithmetic give plain values (``quant`` None): only the weight as
quantized is compressed."""

from __future__ import annotations

import numpy as np

from .common import QuantizedTensor

__all__ = ["QuantizedArray"]


class QuantizedArray(np.ndarray):
    """``q.dequantize()`` as an fp16 array carrying ``quant = q``."""

    quant: QuantizedTensor | None

    def __new__(cls, q: QuantizedTensor):
        obj = np.asarray(q.dequantize()).view(cls)
        obj.quant = q
        obj.flags.writeable = False   # the values are the op's result; writing them would desync quant
        return obj

    def __array_finalize__(self, obj):
        self.quant = None             # views and results of arithmetic are plain values

    def __reduce__(self):             # pickles (and copies) as the plain fp16 values
        return np.asarray(self).copy().__reduce__()
