"""One-dimensional k-means over fp16 weights, run on their histogram.

An fp16 tensor has at most 65,536 distinct values, so k-means over the (value, count) pairs is the
same optimisation as over every element, at a cost set by the distinct values instead of the tensor
size (a 2048 x 8192 matrix is one ``bincount``). In 1-D, sorted centroids partition the sorted values
into runs split at the midpoints, so a Lloyd step is a ``searchsorted`` and two prefix-sum lookups.
Plain k-means: every element counts once, no sensitivity weighting.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fp16_histogram", "kmeans_1d", "nearest_sorted"]

_ALL_CODES = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
_ALL_VALUES = _ALL_CODES.view(np.float16).astype(np.float64)
_FINITE = np.isfinite(_ALL_VALUES)
# codes of the finite fp16 values in ascending value order (-0 and +0 both kept; equal values are harmless)
_ORDER = np.flatnonzero(_FINITE)[np.argsort(_ALL_VALUES[_FINITE], kind="stable")]
_SORTED_VALUES = _ALL_VALUES[_ORDER]
_RANK = np.zeros(1 << 16, np.uint16)  # code -> position in _ORDER (monotonic in the value)
_RANK[_ORDER] = np.arange(_ORDER.size)


def fp16_histogram(w16: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of the finite fp16 array ``w16`` in ascending order (float64) and their counts."""
    codes = w16.reshape(-1).view(np.uint16)
    if codes.size < (1 << 14):  # small groups: sorting beats a 65,536-bin histogram
        ranks, counts = np.unique(_RANK[codes], return_counts=True)
        return _SORTED_VALUES[ranks], counts.astype(np.float64)
    counts = np.bincount(codes, minlength=1 << 16)[_ORDER]
    keep = counts > 0
    return _SORTED_VALUES[keep], counts[keep].astype(np.float64)


def _plusplus(values: np.ndarray, counts: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    # k-means++ (Arthur & Vassilvitskii 2007): each next seed drawn with probability count * D^2
    cum = np.cumsum(counts)
    first = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
    chosen = [values[min(first, values.size - 1)]]
    d2 = (values - chosen[0]) ** 2
    for _ in range(k - 1):
        cum = np.cumsum(counts * d2)
        if cum[-1] <= 0:
            break  # every distinct value is already a centroid
        i = min(int(np.searchsorted(cum, rng.random() * cum[-1], side="right")), values.size - 1)
        chosen.append(values[i])
        np.minimum(d2, (values - values[i]) ** 2, out=d2)
    return np.sort(np.asarray(chosen))


def kmeans_1d(values: np.ndarray, counts: np.ndarray, k: int, rng: np.random.Generator,
              max_iter: int = 50) -> np.ndarray:
    """``k`` sorted centroids of the weighted points (``values`` ascending and distinct, ``counts`` > 0).

    k-means++ seeding from ``rng``, then at most ``max_iter`` Lloyd steps (stops early when the
    partition no longer changes). With fewer distinct values than ``k``, the values themselves are the
    centroids and the last one is repeated to fill ``k``.
    """
    c = _plusplus(values, counts, k, rng)
    cw = np.concatenate([[0.0], np.cumsum(counts)])
    cwv = np.concatenate([[0.0], np.cumsum(counts * values)])
    splits = None
    for _ in range(max_iter):
        # values <= midpoint go to the lower centroid (ties to the lower index, as nearest_sorted)
        new = np.searchsorted(values, (c[:-1] + c[1:]) / 2, side="right")
        if splits is not None and np.array_equal(new, splits):
            break
        splits = new
        lo = np.concatenate([[0], splits])
        hi = np.concatenate([splits, [values.size]])
        n = cw[hi] - cw[lo]
        c = np.where(n > 0, (cwv[hi] - cwv[lo]) / np.where(n > 0, n, 1.0), c)  # empty cluster: keep it
        c = np.sort(c)
    if c.size < k:
        c = np.concatenate([c, np.full(k - c.size, c[-1])])
    return c


def nearest_sorted(table: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Index of the nearest entry of the ascending ``table`` for each ``x`` (ties: the lower index)."""
    t = table.astype(np.float64)
    return np.searchsorted((t[:-1] + t[1:]) / 2, x, side="left")
