"""Keeping a model inside fp16: the ANE computes in fp16 (max 65,504), and models trained in bf16
(Gemma 3 notably) carry residual streams far beyond that.

Two checks, both part of loading:

* weights: a value beyond fp16 is a :class:`ModelFormatError` at conversion (``loaders.load_weights``);
* activations (:class:`Fp16Plan`): the residual stream is carried *scaled* inside the programs
  (``x_prog = s · x``, s a power of two). Every consumer of the stream is a pre-norm (RMSNorm is
  scale-invariant once its eps is scaled by s², which :func:`orion.models.llama._norm` does), every
  producer writes ``s ·`` its output - the scale enters each sublayer BEFORE the projection that writes
  into the stream (the attention output before Wo, the up projection before act·up and W2; a Gemma
  post-norm takes it into its weight), because bf16-trained models' "massive activations" (2e5-6e5 at one
  projection, at a few tokens) overflow fp16 inside the projection itself - and the final norm returns
  to unit scale. The norms become *stable* ones (prescaled by 1/max|x|): the plain sum of squares
  overflows once values pass ~256·sqrt(n), and underflows for a scaled-down stream. The result is the
  same math; only values that were infinite become finite.

:func:`resolve_fp16_plan` decides at load by running a calibration sequence (:func:`calibration_ids`:
BOS, special tokens, delimiters, digits, long words - where massive activations concentrate - and ids
spread over the vocabulary) through the model definition evaluated in float64 on the host
(:mod:`orion.models.host_run`) and measuring the largest value of the stream and of every sublayer value
the scale carries. A peak that only other
text triggers is caught at run time: the engine checks each stage's residual output (the live columns:
a few thousand values per stage) and re-plans on the text that overflowed (:func:`replan`), or raises
:class:`Fp16RangeError` naming the layer when no scale can help.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ..errors import InputError, OrionError
from .fp16_plan import Fp16Plan
from .host_run import HostRun

log = logging.getLogger("orion")

__all__ = ["Fp16Plan", "Fp16RangeError", "check_residual_scale", "resolve_fp16_plan",
           "replan", "stream_peaks", "calibration_ids",
           "FP16_MAX", "HEADROOM"]

FP16_MAX = 65504.0
HEADROOM = 16.0          # other prompts may push the stream past what the probe saw; 16x is kept free
PLAIN_NORM_LIMIT = 64.0  # peak / sqrt(d) above this: squares come within HEADROOM of fp16's max (255^2)
MAX_PROBE_TOKENS = 160   # the float64 probe's length: its cost is ~2 * params * tokens flops at load
SPREAD_TOKENS = 32       # ids spread evenly over the vocabulary, after the text
MAX_SPECIAL_TOKENS = 48  # special / added tokens put into the probe (chat delimiters, BOS, EOS ...)
# Where massive activations concentrate (first token, delimiters, digits, long or rare words, code).
CALIBRATION_TEXT = (
    "The year 2024 began on 1/1; pi = 3.14159265, e = 2.71828 and 1,000,000 > 999,999.\n"
    "Internationalization, counterrevolutionaries, antidisestablishmentarianism, pneumonoultramicroscopic.\n"
    "\"Quoted,\" (parenthesised) [bracketed] {braced} <angled> | piped / slashed \\ back-slashed; semi: colon!\n"
    "def f(x):\n    return x ** 2  # code\n\n\tQ: What is 12 + 30? A: 42. -- end --\n"
    "Élan, naïve café, 東京, Ωμέγα; e-mail info@example.com; https://example.org/a?b=c&d=e#f ...")


class Fp16RangeError(OrionError):
    """A value inside the programs left fp16's range (±65,504) and no residual scale can bring it back:
    ``layer`` (the first whose output was not finite), ``value`` (the largest finite magnitude the stream
    had before it, in true units), ``scale`` (the residual scale in force)."""

    def __init__(self, message: str, layer: int | None = None, value: float | None = None, scale: float = 1.0):
        super().__init__(message)
        self.layer, self.value, self.scale = layer, value, scale


def calibration_ids(cfg, tokenizer=None) -> list[int]:
    """The fp16 probe: BOS, the tokenizer's special tokens, :data:`CALIBRATION_TEXT` and ids spread over
    the vocabulary (at most :data:`MAX_PROBE_TOKENS`, within the model's context)."""
    V = cfg.vocab_size
    ids = [cfg.bos_id] if cfg.bos_id is not None else []
    if tokenizer is not None:
        specials = sorted(getattr(tokenizer, "special_ids", set()) or ())[:MAX_SPECIAL_TOKENS]
        try:
            text = list(tokenizer.encode(CALIBRATION_TEXT))
        except Exception:  # noqa: BLE001 - a tokenizer that cannot encode the text: the ids below still probe
            text = []
        ids += text[:MAX_PROBE_TOKENS // 2] + specials
    ids += [int(cfg.eos_id)] if cfg.eos_id is not None else []
    ids += [int(i) for i in np.linspace(0, V - 1, SPREAD_TOKENS)]
    ids = [int(i) for i in ids if i is not None and 0 <= int(i) < V]
    return ids[:max(1, min(MAX_PROBE_TOKENS, cfg.n_ctx))]


def _checked_ids(cfg, ids) -> list[int]:
    """Probe ids given by the caller: 1..n_ctx integer token ids of the vocabulary."""
    try:
        out = [int(i) for i in ids]
        ok = all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in ids)
    except (TypeError, ValueError):
        ok = False
    if not ok or not 1 <= len(out) <= cfg.n_ctx or not all(0 <= i < cfg.vocab_size for i in out):
        raise InputError(f"probe_ids must be 1 to {cfg.n_ctx} integer token ids in [0, {cfg.vocab_size}), "
                         f"got {str(ids)[:80]}")
    return out


def stream_peaks(cfg, weights: dict, ids=None) -> tuple[float, float]:
    """(largest |residual stream|, largest |sublayer value the scale carries|) on ``ids`` (default:
    :func:`calibration_ids` without a tokenizer): the model definition's stage graphs evaluated in float64
    on the host (:class:`~orion.models.host_run.HostRun`), read at their taps."""
    ids = calibration_ids(cfg) if ids is None else _checked_ids(cfg, ids)
    run = HostRun(cfg, weights, len(ids), peaks=True)
    run.feed(ids)
    return run.max_abs_stream, run.max_abs_branch


def _plan(cfg, residual: float, branch: float, spec) -> Fp16Plan:
    peak = max(residual, branch)
    if not math.isfinite(peak):
        return Fp16Plan(1.0 if spec == "auto" else float(spec))   # the float model itself diverges
    scale = float(spec) if spec != "auto" else 1.0
    need = peak * HEADROOM / FP16_MAX
    if spec == "auto" and need > 1.0:
        scale = 2.0 ** -math.ceil(math.log2(need))
        log.info("orion: the residual stream / a sublayer peaks at %.4g on the probe (fp16 max %g): carried "
                 "scaled by 2^%d inside the programs", peak, FP16_MAX, round(math.log2(scale)))
    return Fp16Plan(scale, scale != 1.0 or residual / math.sqrt(cfg.d_model) > PLAIN_NORM_LIMIT)


def check_residual_scale(spec) -> float:
    """A residual scale given by the user: a positive finite number (a power of two keeps it exact)."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float)) or not (math.isfinite(spec) and spec > 0):
        raise InputError(f"residual_scale must be 'auto' or a positive number, got {spec!r}")
    return float(spec)


def resolve_fp16_plan(cfg, weights: dict, spec="auto", probe_ids=None) -> Fp16Plan:
    """The :class:`Fp16Plan` for ``residual_scale=spec``: a positive number (used as is) or "auto" (1 when
    the probe's peak times :data:`HEADROOM` fits fp16, else the largest power of two that brings it
    there). Stable norms whenever the stream is scaled or the peak would overflow the plain norm.
    ``probe_ids``: the calibration sequence (default :func:`calibration_ids` without a tokenizer)."""
    if spec != "auto":
        check_residual_scale(spec)
    if cfg.family != "llama":
        if spec not in ("auto", 1, 1.0):
            raise InputError(f"residual_scale is implemented for Llama-style models, not {cfg.family}")
        return Fp16Plan()
    return _plan(cfg, *stream_peaks(cfg, weights, probe_ids), spec)


def replan(cfg, weights: dict, ids, current: Fp16Plan, layer: int) -> Fp16Plan:
    """A smaller-scale plan after the programs overflowed at ``layer`` on ``ids`` (the text so far and the
    tokens that overflowed), from the definition's float64 peaks on exactly that text; raises
    :class:`Fp16RangeError` when the scale is not what overflowed (the float model diverges, or the peak
    already fits the current scale: a value the scale does not carry, e.g. a query or gate projection)."""
    residual, branch = stream_peaks(cfg, weights, ids)
    peak = max(residual, branch)
    new = _plan(cfg, residual, branch, "auto")
    if not math.isfinite(peak) or new.scale >= current.scale:
        what = "the float model itself diverges" if not math.isfinite(peak) else (
            f"the stream and the sublayer outputs peak at {peak:.4g}, which the residual scale "
            f"{current.scale:g} already keeps within fp16: a value the scale does not carry overflowed")
        raise Fp16RangeError(
            f"layer {layer}: a value inside the programs left fp16's range (±{FP16_MAX:g}) on this text; "
            f"{what}. Pass a smaller scale to load(..., residual_scale=2**-k) (now {current.scale:g}) "
            f"or run this model on the CPU", layer=layer, value=peak, scale=current.scale)
    return Fp16Plan(min(new.scale, current.scale / 2), True)
