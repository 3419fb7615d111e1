"""The plan that keeps a model's programs inside fp16 (:class:`Fp16Plan`), on its own below the graph builders
that take it (:mod:`orion.models.llama`) and the module that decides it (:mod:`orion.models.fp16_safety`,
which re-exports it and runs the definition on the host to measure)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Fp16Plan"]


@dataclass(frozen=True)
class Fp16Plan:
    """How a model's programs stay inside fp16: the residual stream's ``scale`` and ``stable_norms``."""
    scale: float = 1.0
    stable_norms: bool = False
