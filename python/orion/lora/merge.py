"""Merging an adapter into base weights and back."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .adapter import Adapter
from .errors import AdapterMismatch, AdapterShapeError


def merge(weights: Mapping[str, np.ndarray], adapter: Adapter) -> dict[str, np.ndarray]:
    """New weight dict with ``W + scale · B A`` for every adapted linear (computed in float64, stored in
    W's dtype); other tensors are shared, not copied."""
    return _apply(weights, adapter, +1.0)


def unmerge(weights: Mapping[str, np.ndarray], adapter: Adapter) -> dict[str, np.ndarray]:
    """The inverse of :func:`merge`: ``W - scale · B A`` (exact up to the rounding of W's dtype)."""
    return _apply(weights, adapter, -1.0)


def _apply(weights, adapter: Adapter, sign: float) -> dict:
    out = dict(weights)
    for n in adapter.names:
        if n not in weights:
            raise AdapterMismatch(f"adapter targets {n!r}, which is not in the weights")
        w = np.asarray(weights[n])
        d = adapter.delta(n)
        if d.shape != w.shape:
            raise AdapterShapeError(f"{n}: adapter delta {list(d.shape)} vs weight {list(w.shape)}")
        out[n] = (w.astype(np.float64) + sign * d).astype(w.dtype)
    return out
