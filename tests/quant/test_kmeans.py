"""The histogram k-means equals plain k-means over every element."""

from __future__ import annotations

import numpy as np

from orion.quant.kmeans import fp16_histogram, kmeans_1d, nearest_sorted


def test_histogram_equals_unique_for_small_and_large_arrays():
    rng = np.random.default_rng(0)
    for n in (100, 50_000):  # below and above the sort/bincount switch
        w = (rng.standard_normal(n) * 0.1).astype(np.float16)
        w[:3] = [0.0, -0.0, 0.0]
        values, counts = fp16_histogram(w)
        assert (np.diff(values) >= 0).all() and counts.sum() == n
        # -0 and +0 are two codes of the same value: merge for the comparison
        merged = {}
        for v, c in zip(values, counts):
            merged[v] = merged.get(v, 0) + c
        uv, uc = np.unique(w.astype(np.float64), return_counts=True)
        assert np.array_equal(np.array(list(merged)), uv) and np.array_equal(np.array(list(merged.values())), uc)


def test_lloyd_on_the_histogram_equals_lloyd_on_all_elements():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal(20_000) * 0.05).astype(np.float16)
    values, counts = fp16_histogram(w)
    c = kmeans_1d(values, counts, 8, np.random.default_rng(3), max_iter=200)
    # c is a fixed point of a brute-force Lloyd step over every element
    x = w.astype(np.float64)
    assign = np.abs(x[:, None] - c[None, :]).argmin(axis=1)
    means = np.array([x[assign == j].mean() for j in range(8)])
    assert np.allclose(means, c, rtol=0, atol=1e-12)


def test_finds_separated_clusters():
    x = np.array([-1.0, -0.9, 2.0, 2.2, 5.0])
    c = kmeans_1d(x, np.array([1.0, 1.0, 3.0, 1.0, 2.0]), 3, np.random.default_rng(0))
    assert np.allclose(c, [-0.95, (2.0 * 3 + 2.2) / 4, 5.0])


def test_fewer_distinct_values_than_clusters():
    c = kmeans_1d(np.array([1.0, 3.0]), np.array([5.0, 1.0]), 4, np.random.default_rng(0))
    assert c.size == 4 and set(c) == {1.0, 3.0}


def test_nearest_sorted_breaks_ties_to_the_lower_index():
    t = np.array([0.0, 1.0, 3.0], np.float16)
    assert nearest_sorted(t, np.array([0.5, 0.49, 0.51, 2.0, 7.0, -1.0])).tolist() == [0, 0, 1, 1, 2, 0]
