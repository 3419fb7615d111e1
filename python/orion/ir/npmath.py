"""Numpy math that more than one layer computes the same way: the IR's op references (float64), the
compiler's decompositions (their constants) and the models' float64 references."""

from __future__ import annotations

import math

import numpy as np

GELU_C = math.sqrt(2.0 / math.pi)      # tanh GELU: 0.5x(1 + tanh(GELU_C (x + GELU_CUBIC x^3)))
GELU_CUBIC = 0.044715


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """The tanh approximation of GELU (GPT-2's ``gelu_new``, transformers' ``gelu_pytorch_tanh``)."""
    return 0.5 * x * (1.0 + np.tanh(GELU_C * (x + GELU_CUBIC * x ** 3)))
