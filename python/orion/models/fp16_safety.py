"""Keeping a model inside fp16: the ANE computes in fp16 (max 65,504), and models trained in bf16
(Gemma 3 notably) carry residual streams far beyond that.

Two checks, both part of loading:

* weights: a value beyond fp16 is a :class:`ModelFormatError` at conversion (``loaders.load_weights``);
* activations (:class:`Fp16Plan`): the residual stream is carried *scaled* inside the programs
  (``x_prog = s · x``, s a power of two). Every consumer of the stream is a pre-norm (RMSNorm is
  scale-invariant once its eps is scaled by s², which :func:`orion.models.llama._norm` does), every
  producer adds ``s ·`` its output (folded into Gemma's post-norm weights, a multiply otherwise), and the
  final norm returns to unit scale. The norms become *stable* ones (prescaled by 1/max|x|): the plain
  sum of squares overflows once values pass ~256·sqrt(n), and underflows for a scaled-down stream. The
  result is the same math; only values that were infinite become finite.

:func:`resolve_fp16_plan` decides by running a short probe through the float reference
(:mod:`orion.models.reference`) and measuring the largest residual value.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from ..errors import InputError

log = logging.getLogger("orion")

__all__ = ["Fp16Plan", "resolve_fp16_plan", "resolve_residual_scale", "residual_peak", "FP16_MAX", "HEADROOM"]

FP16_MAX = 65504.0
HEADROOM = 16.0          # other prompts may push the stream past what the probe saw; 16x is kept free
PROBE_TOKENS = 8
PLAIN_NORM_LIMIT = 64.0  # peak / sqrt(d) above this: squares come within HEADROOM of fp16's max (255^2)


@dataclass(frozen=True)
class Fp16Plan:
    """How a model's programs stay inside fp16: the residual stream's ``scale`` and ``stable_norms``."""
    scale: float = 1.0
    stable_norms: bool = False


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


def resolve_fp16_plan(cfg, weights: dict, spec="auto") -> Fp16Plan:
    """The :class:`Fp16Plan` for ``residual_scale=spec``: a positive number (used as is) or "auto" (1 when
    the probe's peak times :data:`HEADROOM` fits fp16, else the largest power of two that brings it
    there). Stable norms whenever the stream is scaled or the peak would overflow the plain norm."""
    if spec != "auto" and (isinstance(spec, bool) or not isinstance(spec, (int, float)) or
                           not (math.isfinite(spec) and spec > 0)):
        raise InputError(f"residual_scale must be 'auto' or a positive number, got {spec!r}")
    if cfg.family != "llama":
        if spec not in ("auto", 1, 1.0):
            raise InputError(f"residual_scale is implemented for Llama-style models, not {cfg.family}")
        return Fp16Plan()
    peak = residual_peak(cfg, weights)
    if not math.isfinite(peak):
        return Fp16Plan(1.0 if spec == "auto" else float(spec))   # the float model itself diverges
    scale = float(spec) if spec != "auto" else 1.0
    need = peak * HEADROOM / FP16_MAX
    if spec == "auto" and need > 1.0:
        scale = 2.0 ** -math.ceil(math.log2(need))
        log.info("orion: residual stream peaks at %.4g on the probe (fp16 max %g): carried scaled by 2^%d "
                 "inside the programs", peak, FP16_MAX, round(math.log2(scale)))
    return Fp16Plan(scale, scale != 1.0 or peak / math.sqrt(cfg.d_model) > PLAIN_NORM_LIMIT)
