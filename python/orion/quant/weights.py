"""Quantize a model's canonical weights (names of ``orion.models.loaders.expected_shapes``) by scheme name.

Only the 2-D linear weights are quantized (``wq wk wv wo w1 w2 w3 wcls``; GPT-2's ``wqkv wo wfc
wproj``), and the token embedding (``tok_emb`` / ``wte``) on request; norms, biases and position
embeddings stay fp16.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from ..errors import QuantizationError
from .blockwise import quantize_blockwise
from .int8 import quantize_int8
from .palettize import palettize

__all__ = ["SCHEMES", "LINEAR_NAMES", "EMBEDDING_NAMES", "WeightReport", "quantize_weights", "quantize_tensor",
           "dequantized_weights", "fitting_divisor"]

#: scheme -> what it is (the options of quantize_weights apply where named)
SCHEMES = {
    "int8": "per-channel symmetric int8, constexpr_affine_dequantize",
    "uint8": "per-channel affine uint8 (zero point), constexpr_affine_dequantize",
    "lut4": "4-bit k-means LUT per lut_group_size output channels, constexpr_lut_to_dense",
    "lut6": "6-bit k-means LUT per lut_group_size output channels, constexpr_lut_to_dense",
    "int4": "symmetric int4 in blocks of block_size inputs, constexpr_blockwise_shift_scale",
    "uint4": "affine uint4 + uint4 offset in blocks of block_size inputs, constexpr_blockwise_shift_scale",
}
LINEAR_NAMES = frozenset({"wq", "wk", "wv", "wo", "w1", "w2", "w3", "wcls", "wqkv", "wfc", "wproj"})
EMBEDDING_NAMES = frozenset({"tok_emb", "wte"})


def _check_scheme(scheme) -> str:
    if scheme not in SCHEMES:
        raise QuantizationError(f"unknown quantization scheme {scheme!r}; choose one of {sorted(SCHEMES)}")
    return scheme


def fitting_divisor(n: int, want: int | None) -> int | None:
    """The smallest divisor of ``n`` that is >= ``want`` (``n`` itself at worst: one group / block for the
    whole dim); None stays None (per tensor). E.g. d_ff = 172 with a wanted 16 -> 43, with 32 -> 43."""
    if want is None:
        return None
    want = max(1, min(int(want), int(n)))
    return next(d for d in range(want, int(n) + 1) if n % d == 0)


def quantize_tensor(w: np.ndarray, scheme: str, *, lut_group_size: int | None = 16, block_size: int = 32,
                    seed=0, fit: bool = False):
    """One tensor by scheme name; returns an ``AffineQuantized``, ``LutQuantized`` or ``BlockwiseQuantized``.

    ``fit=True``: a ``lut_group_size`` / ``block_size`` that does not divide the tensor's output / input
    dim is replaced by :func:`fitting_divisor` of it (instead of raising)."""
    scheme = _check_scheme(scheme)
    if fit:
        shape = np.shape(w)
        lut_group_size = fitting_divisor(shape[0], lut_group_size)
        block_size = fitting_divisor(shape[1], block_size) if len(shape) > 1 else block_size
    if scheme in ("int8", "uint8"):
        return quantize_int8(w, symmetric=scheme == "int8")
    if scheme in ("lut4", "lut6"):
        return palettize(w, int(scheme[3:]), group_size=lut_group_size, seed=seed)
    return quantize_blockwise(w, 4, block_size=block_size, symmetric=scheme == "int4")


@dataclass(frozen=True)
class WeightReport:
    """Bytes of a model's weights before (all fp16) and after quantization (blob payloads)."""

    scheme: str
    tensors: dict = field(default_factory=dict)  #: quantized name -> (fp16 bytes, compressed bytes)
    kept: tuple = ()  #: names left in fp16
    fp16_bytes: int = 0  #: every tensor at fp16
    quantized_bytes: int = 0  #: quantized tensors compressed + kept tensors at fp16

    @property
    def ratio(self) -> float:
        return self.quantized_bytes / self.fp16_bytes if self.fp16_bytes else 1.0

    def __str__(self) -> str:
        return (f"{self.scheme}: {len(self.tensors)} tensors quantized, {len(self.kept)} kept fp16; "
                f"{self.quantized_bytes:,} bytes vs {self.fp16_bytes:,} fp16 ({100 * self.ratio:.1f}%)")


def quantize_weights(weights: dict, scheme: str, *, include_embeddings: bool = False,
                     lut_group_size: int | None = 16, block_size: int = 32, seed: int = 0, fit: bool = False,
                     names=None):
    """Quantize the linear weights of ``weights`` (canonical name -> array) with ``scheme``.

    Returns ``(quantized, report)``: ``quantized`` maps each quantized name to its dataclass (shape
    as given, ``[out, in]``; see ``expand_rank`` for conv layouts), ``report`` is a
    :class:`WeightReport`. Names are matched on their last component (``layers.3.wq`` -> ``wq``).
    ``lut_group_size`` (LUT schemes; None = one table per tensor) must divide the output dims and
    ``block_size`` (int4/uint4) the input dims, else :class:`orion.QuantizationError` names the tensor —
    unless ``fit``, which takes the smallest divisor above them per tensor (:func:`fitting_divisor`).
    ``names`` (optional): a predicate on the full name restricting which linear weights are quantized.
    Each tensor's k-means seed derives from ``seed`` and its name, so results do not depend on the
    dict's order.
    """
    _check_scheme(scheme)
    if not isinstance(weights, dict):
        raise QuantizationError(f"weights must be a dict name -> array, got {type(weights).__name__}")
    targets = LINEAR_NAMES | (EMBEDDING_NAMES if include_embeddings else frozenset())
    quantized, sizes, kept = {}, {}, []
    fp16_total = total = 0
    for name, w in weights.items():
        n = int(np.asarray(w).size) * 2
        fp16_total += n
        if name.rsplit(".", 1)[-1] not in targets or (names is not None and not names(name)):
            kept.append(name)
            total += n
            continue
        if np.ndim(w) != 2:
            raise QuantizationError(f"{name}: a linear weight must be 2-D [out, in], got shape {list(np.shape(w))}")
        try:
            q = quantize_tensor(w, scheme, lut_group_size=lut_group_size, block_size=block_size,
                                seed=[seed, zlib.crc32(name.encode())], fit=fit)
        except QuantizationError as e:
            raise QuantizationError(f"{name}: {e}") from None
        quantized[name] = q
        sizes[name] = (n, q.nbytes)
        total += q.nbytes
    report = WeightReport(scheme, sizes, tuple(kept), fp16_total, total)
    return quantized, report


def dequantized_weights(weights: dict, quantized: dict) -> dict:
    """``weights`` with every quantized tensor replaced by what its constexpr op computes (fp16): the
    dense weights a quantized model runs with, e.g. for a CPU reference or :mod:`orion.quant.quality`."""
    missing = [k for k in quantized if k not in weights]
    if missing:
        raise QuantizationError(f"quantized tensor(s) {missing[:5]} are not in the weights")
    return {k: quantized[k].dequantize() if k in quantized else v for k, v in weights.items()}
