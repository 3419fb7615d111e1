"""Choosing the next token: :class:`SamplingParams`, the distribution it defines (:func:`sampling_probs`:
repetition penalty, greedy, temperature, top-k, top-p) and :func:`sample_next`, a draw from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from ..errors import InputError

__all__ = ["SamplingParams", "draw", "sample_next", "sampling_probs"]


@dataclass
class SamplingParams:
    max_tokens: int = 64
    temperature: float = 0.0          # 0 = greedy
    top_k: int = 0                    # 0 = off
    top_p: float = 1.0                # 1 = off
    repetition_penalty: float = 1.0   # 1 = off (HF/CTRL: positive logits / p, negative * p)
    seed: int | None = None
    stop_tokens: Iterable[int] | None = None   # None = the model's end-of-text token(s)

    def validate(self) -> None:
        if not isinstance(self.max_tokens, (int, np.integer)) or self.max_tokens < 0:
            raise InputError(f"max_tokens must be a non-negative integer, got {self.max_tokens!r}")
        if not self.temperature >= 0:
            raise InputError(f"temperature must be >= 0, got {self.temperature!r}")
        if self.top_k < 0:
            raise InputError(f"top_k must be >= 0, got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not self.repetition_penalty > 0:
            raise InputError(f"repetition_penalty must be > 0, got {self.repetition_penalty!r}")


def _penalised(logits: np.ndarray, params: SamplingParams, history: Sequence[int]) -> np.ndarray:
    """float64 logits with the repetition penalty applied (HF/CTRL: positive / p, negative * p)."""
    z = np.array(logits, dtype=np.float64)
    if params.repetition_penalty != 1.0 and len(history):
        idx = np.unique(np.asarray(history, dtype=np.int64))
        vals = z[idx]
        z[idx] = np.where(vals > 0, vals / params.repetition_penalty, vals * params.repetition_penalty)
    return z


def sampling_probs(logits: np.ndarray, params: SamplingParams, history: Sequence[int] = ()) -> np.ndarray:
    """The distribution :func:`sample_next` draws from, float64 ``[V]`` summing to 1: repetition penalty,
    then temperature -> top-k -> top-p (nucleus); greedy (temperature 0) is the point mass at the argmax.
    Speculative sampling compares these distributions (target and draft), so they are the one definition."""
    z = _penalised(logits, params, history)
    if params.temperature == 0:
        p = np.zeros_like(z)
        p[int(np.argmax(z))] = 1.0
        return p
    z = z / params.temperature
    if 0 < params.top_k < z.size:
        kth = np.partition(z, -params.top_k)[-params.top_k]
        z = np.where(z >= kth, z, -np.inf)
    z = z - z.max()
    p = np.exp(z)
    p /= p.sum()
    if params.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        keep = int(np.searchsorted(cum, params.top_p)) + 1      # smallest prefix reaching top_p
        mask = np.zeros_like(p, dtype=bool)
        mask[order[:keep]] = True
        p = np.where(mask, p, 0.0)
        p /= p.sum()
    return p


def draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One index drawn with probabilities proportional to ``p`` (non-negative, not all zero)."""
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), p.size - 1))


def sample_next(logits: np.ndarray, params: SamplingParams, history: Sequence[int] = (),
                rng: np.random.Generator | None = None) -> int:
    """One token from ``logits [V]``: repetition penalty, then greedy (temperature 0) or a draw from
    :func:`sampling_probs`."""
    if params.temperature == 0:
        return int(np.argmax(_penalised(logits, params, history)))
    return draw(sampling_probs(logits, params, history), rng or np.random.default_rng())
