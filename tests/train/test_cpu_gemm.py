"""The trainer's CPU weight-gradient products (step.matmul_f32): on AVX-512 kernels orion's own fp32 GEMM
(the same in-order fma chain per element whatever BLAS numpy has), elsewhere numpy's; layouts the native
kernel does not read (or other dtypes) go to numpy."""

from __future__ import annotations

import numpy as np

from orion import _native
from orion.train import step
from orion.train.step import GradAccumulator, matmul_f32


def test_weight_gradient_products_use_the_native_gemm_on_avx512():
    rng = np.random.default_rng(0)
    dy, x = rng.standard_normal((48, 40), dtype=np.float32), rng.standard_normal((36, 40), dtype=np.float32)
    got = matmul_f32(dy, x.T)                                           # dW = dY . X^T, X^T read in place
    np.testing.assert_allclose(got, dy.astype(np.float64) @ x.T, rtol=1e-5, atol=1e-5)
    if _native.kernel_isa() == "avx512":
        ref = np.empty_like(got)
        _native.gemm_f32(dy, x.T, ref)
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    acc = GradAccumulator({"w": np.full((48, 36), 7.0, np.float32)})
    acc.mm("w", dy, x.T)                                                # first write: the product itself
    np.testing.assert_array_equal(acc["w"], got)
    acc.mm("w", dy, x.T)                                                # then accumulated
    np.testing.assert_array_equal(acc["w"], got + got)


def test_other_layouts_and_dtypes_fall_back_to_numpy(monkeypatch):
    calls = []
    monkeypatch.setattr(step, "_native_gemm", lambda *a: calls.append(a))
    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 12), dtype=np.float32)
    b = rng.standard_normal((12, 24), dtype=np.float32)
    np.testing.assert_allclose(matmul_f32(a, b[:, ::2]), a @ b[:, ::2], rtol=1e-6)   # strided both ways
    np.testing.assert_allclose(matmul_f32(a.astype(np.float64), b), a.astype(np.float64) @ b, rtol=1e-12)
    assert calls == []
    matmul_f32(a, b)
    assert len(calls) == 1


def test_the_classifier_logits_are_the_native_product_of_w_and_the_final_hidden():
    if _native.kernel_isa() != "avx512":
        return                                                         # numpy's product elsewhere
    rng = np.random.default_rng(2)
    W, xf = rng.standard_normal((300, 24), dtype=np.float32), rng.standard_normal((24, 16), dtype=np.float32)
    eng = step.StepEngine.__new__(step.StepEngine)                      # _logits needs no programs
    eng._pool, eng._pending = None, []
    z = eng._logits(xf, W)
    ref = np.empty((300, 16), np.float32)
    _native.gemm_f32(W, xf, ref)                                        # W.xf as stored, read back transposed
    assert z.shape == (16, 300)
    np.testing.assert_array_equal(z.view(np.uint32), ref.T.view(np.uint32))


def test_row_max_is_numpys_max_in_both_layouts_and_propagates_nan():
    rng = np.random.default_rng(2)
    for shape in [(4, 32000), (3, 1001), (5, 64), (7, 65), (2, 127), (4, 50)]:
        for order in "CF":                         # F: the native classifier's logits (a transposed view)
            z = np.asarray(rng.standard_normal(shape, dtype=np.float32), order=order)
            z[0, -1] = 100.0                                    # the maximum in the odd last column
            np.testing.assert_array_equal(step.row_max(z), z.max(axis=1, keepdims=True))
            z[-1, shape[1] // 2] = np.nan
            got = step.row_max(z)
            assert np.isnan(got[-1, 0]) and got.shape == (shape[0], 1)
            np.testing.assert_array_equal(got[:-1], z[:-1].max(axis=1, keepdims=True))


def test_cross_entropy_of_column_major_logits_is_that_of_the_same_values_row_major():
    rng = np.random.default_rng(3)
    logits = (rng.standard_normal((3000, 40), dtype=np.float32) * 4).T          # [S, V] column-major
    t = rng.integers(0, 3000, 40)
    loss, prob = step.cross_entropy(logits, t)
    z = logits.astype(np.float64)
    ref = np.log(np.exp(z - z.max(1, keepdims=True)).sum(1)) + z.max(1) - z[np.arange(40), t]
    np.testing.assert_allclose(loss, ref, rtol=1e-6)
    np.testing.assert_allclose(prob.sum(1), 1.0, rtol=1e-5)
