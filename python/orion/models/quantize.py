"""Compressed weights for a loaded model (``orion.models.load(path, quantize=...)``): every linear weight of
the layers (``layers.N.wq ... w3``; GPT-2's ``wqkv wo wfc wproj``) becomes an
:class:`orion.quant.QuantizedArray`, which the stage graphs bake as a constexpr op (the programs hold
the compressed bytes) and every numpy consumer reads as the exact fp16 values the op produces.

Kept fp16: embeddings, norms, biases and the classifier (it runs on the CPU by default; a device
classifier is sliced into row chunks, which a compressed weight does not survive). Group / block sizes
that do not divide a tensor (stories260K's d_ff = 172 with LUT groups of 16, int4 blocks of 32) are
replaced per tensor by the smallest divisor above them (:func:`orion.quant.fitting_divisor`; 172 -> 43).
"""

from __future__ import annotations

from ..errors import InputError
from ..quant import QuantizedArray, quantize_weights

__all__ = ["MODEL_SCHEMES", "quantize_model"]

#: the schemes ``load(quantize=...)`` and ``orion generate --quantize`` take
MODEL_SCHEMES = ("int8", "uint8", "lut4", "lut6", "int4", "uint4")


def quantize_model(weights: dict, scheme: str, *, seed: int = 0):
    """``(weights with the layers' linears quantized, WeightReport)``; the input dict is not modified."""
    if scheme not in MODEL_SCHEMES:
        raise InputError(f"quantize must be one of {', '.join(MODEL_SCHEMES)} (or None for fp16), got {scheme!r}")
    q, report = quantize_weights(weights, scheme, fit=True, seed=seed, names=lambda n: n.startswith("layers."))
    out = dict(weights)
    for name, qt in q.items():
        out[name] = QuantizedArray(qt)
    return out, report
