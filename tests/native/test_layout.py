"""orion.native.layout.transposed is numpy's ascontiguousarray(x.transpose(perm)) for every dtype, rank and
permutation, natively above the small-array cutoff, through numpy for small or non-contiguous arrays - the path
a weight takes into its surface layout (DynamicWeight.to_surface)."""

import numpy as np
import pytest

from orion.native.layout import transposed

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.uint8, np.float64])
@pytest.mark.parametrize("shape,perm", [((300, 200), (1, 0)), ((8, 64, 300), (0, 2, 1)), ((4, 5, 6, 70), (3, 1, 0, 2)),
                                        ((3, 4), (1, 0))])
def test_transposed_is_numpys_contiguous_transpose(dtype, shape, perm):
    x = (RNG.standard_normal(shape) * 100).astype(dtype)
    got = transposed(x, perm)
    want = np.ascontiguousarray(x.transpose(perm))
    assert got.flags.c_contiguous and got.dtype == x.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    view = x[..., ::2] if x.shape[-1] > 2 else x.T     # not C-contiguous: numpy's copy
    np.testing.assert_array_equal(transposed(view, perm), np.ascontiguousarray(view.transpose(perm)))


def test_to_surface_panels_equal_numpys_layout():
    """A [OC, IC] weight into column panels [1, OC/P, IC, P] and into conv_t [1, IC, 1, OC]."""
    from orion.compiler.passes.context import DynamicWeight
    w = RNG.standard_normal((256, 192)).astype(np.float16)
    p = DynamicWeight("w", (256, 192), "conv_p", "in", (1, 4, 192, 64))
    np.testing.assert_array_equal(p.to_surface(w), w.reshape(4, 64, 192).transpose(0, 2, 1).reshape(1, 4, 192, 64))
    t = DynamicWeight("w", (256, 192), "conv_t", "in", (1, 192, 1, 256))
    np.testing.assert_array_equal(t.to_surface(w), w.T.reshape(1, 192, 1, 256))


def test_element_sizes_and_ranks_the_native_transpose_lacks_go_through_numpy():
    """complex128 (16-byte elements) and rank 9 are numpy's, not an error from the native kernel."""
    z = (RNG.standard_normal((200, 300)) + 1j).astype(np.complex128)
    np.testing.assert_array_equal(transposed(z, (1, 0)), z.T)
    r9 = RNG.standard_normal((2,) * 8 + (200,)).astype(np.float32)
    perm = tuple(range(8, -1, -1))
    np.testing.assert_array_equal(transposed(r9, perm), np.ascontiguousarray(r9.transpose(perm)))
