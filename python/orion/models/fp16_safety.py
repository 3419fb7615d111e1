"""Keeping a model inside fp16: the ANE computes in fp16 (max 65,504), and models trained in bf16
(Gemma 3 notably) carry residual streams far beyond that.

Two checks, both part of loading:

* weights: a value beyond fp16 is a :class:`ModelFormatError` at conversion (``loaders.load_weights``);
* activations: the residual stream is carried *scaled* inside the programs (``x_prog = s · x``, s a power
  of two). Every consumer of the stream is a pre-norm (RMSNorm is scale-invariant once its eps is scaled
  by s², which :func:`orion.models.llama._norm` does), every producer adds ``s ·`` its output (folded into
  Gemma's post-norm weights, a multiply otherwise), and the final norm returns to unit scale. The result
  is the same math; only values that were infinite become finite.

:func:`resolve_residual_scale` picks ``s`` by running a short probe through the float reference
(:mod:`orion.models.reference`) and measuring the largest residual value.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ..errors import InputError

log = logging.getLogger("orion")

__all__ = ["resolve_residual_scale", "residual_peak", "FP16_MAX", "HEADROOM"]

FP16_MAX = 65504.0
HEADROOM = 16.0          # other prompts may push the stream past what the probe saw; 16x is kept free
PROBE_TOKENS = 8


def residual_peak(cfg, weights: dict) -> float:
    """The largest |value| of the residual stream on a fixed probe (BOS + token ids spread over the
    vocabulary), computed in float64 by the reference (one weight matrix converted at a time)."""
    from .reference import llama_forward
    V = cfg.vocab_size
    start = [cfg.bos_id] if cfg.bos_id is not None and 0 <= cfg.bos_id < V else []
    ids = start + [int(i) for i in np.linspace(0, V - 1, PROBE_TOKENS)]
    stats: dict = {}
    llama_forward(cfg, weights, ids, stats=stats)
    return stats["max_abs_residual"]


def resolve_residual_scale(cfg, weights: dict, spec="auto") -> float:
    """``spec``: a positive number (used as is), or "auto": 1 when the probe's peak times
    :data:`HEADROOM` fits fp16, else the largest power of two that brings it there."""
    if spec == "auto":
        if cfg.family != "llama":
            return 1.0
        peak = residual_peak(cfg, weights)
        if not math.isfinite(peak):
            return 1.0          # the float reference itself diverges: nothing a scale can fix
        need = peak * HEADROOM / FP16_MAX
        if need <= 1.0:
            return 1.0
        scale = 2.0 ** -math.ceil(math.log2(need))
        log.info("orion: residual stream peaks at %.4g on the probe (fp16 max %g): carried scaled by 2^%d "
                 "inside the programs", peak, FP16_MAX, round(math.log2(scale)))
        return scale
    if isinstance(spec, bool) or not isinstance(spec, (int, float)) or not (math.isfinite(spec) and spec > 0):
        raise InputError(f"residual_scale must be 'auto' or a positive number, got {spec!r}")
    if spec != 1.0 and cfg.family != "llama":
        raise InputError(f"residual_scale is implemented for Llama-style models, not {cfg.family}")
    return float(spec)
