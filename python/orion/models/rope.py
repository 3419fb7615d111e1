"""Rotary position embeddings: one description (:class:`Rope`) and one frequency formula for every family.

The frequencies follow transformers' ``ROPE_INIT_FUNCTIONS`` for the types orion implements:
``default`` (``theta^(-2i/hd)``), ``linear`` (divided by ``factor``) and ``llama3`` (long wavelengths
divided by ``factor``, a smooth blend in between). Anything else (``dynamic``, ``yarn``, ``longrope``,
partial rotary factors, ...) changes the math and is refused by the config readers with a
:class:`orion.ModelFormatError` naming it - never approximated.

Inference, the float64 reference and training all take their angles from :meth:`Rope.angles`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Rope", "ROPE_TYPES"]

ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True)
class Rope:
    theta: float = 10000.0
    type: str = "default"
    factor: float = 1.0                         # linear, llama3
    low_freq_factor: float = 1.0                # llama3
    high_freq_factor: float = 4.0               # llama3
    original_max_position_embeddings: int = 8192  # llama3

    def __post_init__(self):
        if self.type not in ROPE_TYPES:
            raise ValueError(f"rope type {self.type!r} is not implemented (orion implements {', '.join(ROPE_TYPES)})")
        if not (isinstance(self.theta, (int, float)) and self.theta > 0 and math.isfinite(self.theta)):
            raise ValueError(f"rope theta must be a positive number, got {self.theta!r}")
        if self.type != "default" and not self.factor > 0:
            raise ValueError(f"rope factor must be positive, got {self.factor!r}")
        if self.type == "llama3" and not self.high_freq_factor > self.low_freq_factor > 0:
            raise ValueError(f"llama3 rope needs high_freq_factor > low_freq_factor > 0, got "
                             f"{self.high_freq_factor!r} and {self.low_freq_factor!r}")

    def inv_freq(self, head_dim: int) -> np.ndarray:
        """``[head_dim / 2]`` float64 inverse frequencies."""
        inv = 1.0 / np.power(float(self.theta), np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
        if self.type == "linear":
            return inv / self.factor
        if self.type == "llama3":
            old = float(self.original_max_position_embeddings)
            low_wavelen, high_wavelen = old / self.low_freq_factor, old / self.high_freq_factor
            wavelen = 2 * math.pi / inv
            scaled = np.where(wavelen > low_wavelen, inv / self.factor, inv)
            smooth = (old / wavelen - self.low_freq_factor) / (self.high_freq_factor - self.low_freq_factor)
            blended = (1 - smooth) * scaled / self.factor + smooth * scaled
            medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
            return np.where(medium, blended, scaled)
        return inv

    def angles(self, head_dim: int, positions) -> np.ndarray:
        """``[head_dim / 2, n]`` float64 angles for absolute ``positions``."""
        return self.inv_freq(head_dim)[:, None] * np.asarray(positions, np.float64)[None, :]

    def to_dict(self) -> dict:
        return asdict(self)
