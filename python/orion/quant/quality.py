"""How far quantized logits are from the fp16 ones: the numbers ANEMLL publishes, plus perplexity.

All functions take logits ``[T, V]`` (leading dims are flattened into positions) and compute in
float64 on the given values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import QuantizationError

__all__ = ["kl_divergence", "logit_correlation", "top1_match", "perplexity", "QualityReport", "quality_report"]


def _logits(x, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind != "f" or a.ndim < 1 or a.shape[-1] < 2 or a.size == 0:
        raise QuantizationError(f"{what}: logits must be a float array [..., V] with V >= 2, got "
                                f"{a.dtype} {list(a.shape)}")
    a = a.reshape(-1, a.shape[-1]).astype(np.float64)
    if not np.isfinite(a).all():
        t = int(np.argwhere(~np.isfinite(a))[0][0])
        raise QuantizationError(f"{what}: logits at position {t} are not finite; the model overflowed")
    return a


def _pair(ref, test) -> tuple[np.ndarray, np.ndarray]:
    r, t = _logits(ref, "reference"), _logits(test, "test")
    if r.shape != t.shape:
        raise QuantizationError(f"reference logits {list(np.shape(ref))} and test logits "
                                f"{list(np.shape(test))} must have the same shape")
    return r, t


def _log_softmax(a: np.ndarray) -> np.ndarray:
    a = a - a.max(axis=-1, keepdims=True)
    return a - np.log(np.exp(a).sum(axis=-1, keepdims=True))


def kl_divergence(ref, test) -> float:
    """Mean over positions of KL(P_ref || P_test) in nats, P = softmax of the logits."""
    r, t = _pair(ref, test)
    lr, lt = _log_softmax(r), _log_softmax(t)
    return float(np.mean(np.sum(np.exp(lr) * (lr - lt), axis=-1)))


def logit_correlation(ref, test) -> float:
    """Mean over positions of the Pearson correlation between the two logit vectors."""
    r, t = _pair(ref, test)
    r = r - r.mean(axis=-1, keepdims=True)
    t = t - t.mean(axis=-1, keepdims=True)
    den = np.sqrt((r * r).sum(axis=-1) * (t * t).sum(axis=-1))
    if (den == 0).any():
        p = int(np.flatnonzero(den == 0)[0])
        raise QuantizationError(f"logits at position {p} are constant; their correlation is undefined")
    return float(np.mean((r * t).sum(axis=-1) / den))


def top1_match(ref, test) -> float:
    """Fraction of positions where both logit vectors have the same argmax."""
    r, t = _pair(ref, test)
    return float(np.mean(r.argmax(axis=-1) == t.argmax(axis=-1)))


def perplexity(logits, targets) -> float:
    """``exp(mean(-log softmax(logits[i])[targets[i]]))``; ``logits[i]`` is the prediction for
    ``targets[i]`` (for a token sequence: logits of positions 0..n-2, targets = tokens 1..n-1)."""
    a = _logits(logits, "logits")
    y = np.asarray(targets)
    if y.dtype.kind not in "iu" or y.reshape(-1).shape != (a.shape[0],):
        raise QuantizationError(f"targets must be {a.shape[0]} integer token ids (one per position), got "
                                f"{y.dtype} {list(y.shape)}")
    y = y.reshape(-1).astype(np.int64)
    if y.size and (y.min() < 0 or y.max() >= a.shape[1]):
        raise QuantizationError(f"targets span [{y.min()}, {y.max()}], outside the vocabulary [0, {a.shape[1]})")
    nll = -_log_softmax(a)[np.arange(a.shape[0]), y]
    return float(np.exp(nll.mean()))


@dataclass(frozen=True)
class QualityReport:
    """Test logits against reference (fp16) logits over ``positions`` positions."""

    positions: int
    kl_divergence: float
    correlation: float
    top1_match: float
    perplexity_ref: float | None = None  #: with targets only
    perplexity_test: float | None = None

    def __str__(self) -> str:
        s = (f"KL {self.kl_divergence:.4f} nats, logit correlation {self.correlation:.4f}, "
             f"top-1 match {100 * self.top1_match:.1f}% over {self.positions} positions")
        if self.perplexity_ref is not None:
            s += f"; perplexity {self.perplexity_test:.3f} (reference {self.perplexity_ref:.3f})"
        return s


def quality_report(ref, test, targets=None) -> QualityReport:
    """All metrics at once; perplexities when ``targets`` (one token id per position) are given."""
    r, _ = _pair(ref, test)
    pr = pt = None
    if targets is not None:
        pr, pt = perplexity(ref, targets), perplexity(test, targets)
    return QualityReport(r.shape[0], kl_divergence(ref, test), logit_correlation(ref, test),
                         top1_match(ref, test), pr, pt)
