"""Compressed weights in the exact layouts of the MIL constexpr ops, in numpy.

One module per scheme, each returning a :class:`QuantizedTensor` dataclass with the op's operands,
``dequantize()`` (the fp16 result the op computes: the reference for the simulator's bit-equality
tests), ``nbytes`` (blob payload bytes, sub-byte packing included), ``operands()`` and
``expand_rank()``:

- :func:`quantize_int8` -> :class:`AffineQuantized` (``constexpr_affine_dequantize``)
- :func:`palettize` -> :class:`LutQuantized` (``constexpr_lut_to_dense``, iOS18)
- :func:`quantize_blockwise` -> :class:`BlockwiseQuantized` (``constexpr_blockwise_shift_scale``)

plus MILBlob sub-byte packing (:mod:`.packing`), logit quality metrics (:mod:`.quality`) and
model-level :func:`quantize_weights` (:mod:`.weights`).
"""

from .array import QuantizedArray
from .blockwise import BlockwiseQuantized, quantize_blockwise
from .common import QuantizedTensor
from .int8 import AffineQuantized, quantize_int8
from .packing import PackedInts, pack_bits, unpack_bits
from .palettize import LutQuantized, palettize
from .quality import (QualityReport, kl_divergence, logit_correlation, perplexity, quality_report,
                      top1_match)
from .weights import (SCHEMES, WeightReport, dequantized_weights, fitting_divisor, quantize_tensor,
                      quantize_weights)

__all__ = [
    "QuantizedTensor", "QuantizedArray", "AffineQuantized", "quantize_int8", "LutQuantized", "palettize", "BlockwiseQuantized",
    "quantize_blockwise",
    "PackedInts", "pack_bits", "unpack_bits", "QualityReport", "kl_divergence", "logit_correlation",
    "top1_match", "perplexity", "quality_report", "SCHEMES", "WeightReport", "quantize_tensor",
    "quantize_weights", "dequantized_weights", "fitting_divisor",
]
