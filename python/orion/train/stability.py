"""fp16 safety of the training step (C37), with counters.

Where overflow really occurs, and what is done about it:

* host → device activations (the fp32 residual stream written into fp16 surfaces): a stream that the
  initial weights drive beyond fp16 (bf16-trained models, Gemma 3) is written scaled by a power of two
  (``Trainer.residual_scale``, from :mod:`orion.models.fp16_safety`; the programs' input norms take
  eps·s²). Finite values still beyond ±65,504 would become ±inf: they are clamped to ±65,504 and counted
  (``boundary_clamps``); NaN and inf are never rewritten (they propagate and the step is counted and
  skipped).
* RMSNorm on the device: the sum of squares overflows fp16 once the RMS of a column exceeds ~256 and the
  plain norm silently returns zeros. The programs prescale by 1/max|x| (ops.inv_rms); columns that
  the plain norm would have broken are counted (``norm_rescues``) from the fp32 copy on the host.
* attention scores before the softmax: Q·Kᵀ beyond the fp16 range is inf and the softmax turns it into
  NaN. The programs clamp scores to ±SCORE_CLAMP; the clamped elements are counted (``score_clamps``)
  from the q/k outputs (a cheap per-head bound first, the exact count only when the bound is exceeded).
* gradients: never clamped. Scaled gradients beyond the fp16 range, or non-finite gradients, skip the
  optimizer step and halve the loss scale (optim.LossScaler); counted as ``skipped_steps``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from ..native.convert import to_fp32
from .programs import SCORE_CLAMP

FP16_MAX = 65504.0


@dataclass
class StabilityStats:
    boundary_clamps: int = 0       # activation elements clamped to +-65504 at the fp16 boundary
    norm_rescues: int = 0          # norm columns whose plain fp16 sum of squares would overflow
    score_clamps: int = 0          # attention scores clamped before the softmax
    grad_overflows: int = 0        # backward passes stopped because a scaled gradient left the fp16 range
    nonfinite_loss: int = 0        # forward passes that produced a NaN/inf loss
    skipped_steps: int = 0         # optimizer steps skipped (non-finite gradients or loss)
    matmul_saturations: int = 0    # device matmuls that saturated to inf (C36; simulator reports)

    def as_dict(self) -> dict:
        return asdict(self)

    def add(self, other: "StabilityStats") -> None:
        for k, v in asdict(other).items():
            setattr(self, k, getattr(self, k) + v)


def to_device_activation(x: np.ndarray, stats: StabilityStats, enabled: bool = True) -> np.ndarray:
    """``x`` ready for an fp16 surface: finite values beyond ±65,504 clamped (counted); NaN and inf
    are never rewritten (they propagate to the loss, and the step is counted and skipped)."""
    if not enabled:
        return x
    if x.size and -FP16_MAX <= x.min() and x.max() <= FP16_MAX:     # the common case: two passes, no temporaries
        return x                                                      # (NaN compares False: the full check)
    a = np.abs(x)
    big = (a > FP16_MAX) & (a < np.inf)       # NaN compares False
    n = int(np.count_nonzero(big))
    if n:
        stats.boundary_clamps += n
        x = np.where(big, np.sign(x) * FP16_MAX, x).astype(x.dtype, copy=False)
    return x


def grad_fits_fp16(g: np.ndarray) -> bool:
    """A scaled gradient can go to the device only if every element is finite and within ±65,504."""
    m = float(np.max(np.abs(g))) if g.size else 0.0
    return m <= FP16_MAX          # NaN -> False


def count_norm_overflow(x: np.ndarray) -> int:
    """Columns of ``x`` [C, S] whose plain fp16 RMSNorm (sum of (x/sqrt(C))^2) would overflow."""
    ms = np.einsum("cs,cs->s", x, x, dtype=np.float64) / x.shape[0]
    return int(np.count_nonzero(ms > FP16_MAX))


def count_score_clamps(q: np.ndarray, k: np.ndarray, n_heads: int, n_kv: int, clamp: float = SCORE_CLAMP,
                       scale: float | None = None) -> int:
    """Causal attention scores |q_i·k_j|·scale > clamp (scale: the model's query scale, default
    1/sqrt(hd)), for q [H*hd, S] and k [KV*hd, S]."""
    s = q.shape[-1]
    hd = q.shape[0] // n_heads
    g = n_heads // n_kv
    qh = to_fp32(q).reshape(n_heads, hd, s)
    kh = to_fp32(k).reshape(n_kv, hd, s)
    qn = np.sqrt(np.einsum("hds,hds->hs", qh, qh)).max(axis=1)
    kn = np.sqrt(np.einsum("hds,hds->hs", kh, kh)).max(axis=1)
    total = 0
    scale = 1.0 / math.sqrt(hd) if scale is None else scale
    for h in range(n_heads):
        kv = h // g
        if not (qn[h] * kn[kv] * scale > clamp):
            continue                               # Cauchy-Schwarz: no score can reach the clamp
        sc = (qh[h].T @ kh[kv]) * scale            # [Sq, Skv]
        tri = np.tril(np.ones((s, s), bool))
        total += int(np.count_nonzero((np.abs(sc) > clamp) & tri))
    return total


