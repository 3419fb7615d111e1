"""Array layout changes through the native tiled transpose (cpu/kernels/layout.cpp): a weight reordered into its
surface layout (a program input's column panels) is a transpose of tens of MB, which numpy's strided copy does at
half the speed on one thread."""

from __future__ import annotations

import numpy as np

from .. import _native

_SMALL = 1 << 15       # below this many elements numpy's copy costs less than a native call


def transposed(arr, perm) -> np.ndarray:
    """``np.ascontiguousarray(arr.transpose(perm))``: the same array, natively for a C-contiguous one."""
    arr = np.asarray(arr)
    if arr.size < _SMALL or not arr.flags.c_contiguous or arr.itemsize not in (1, 2, 4, 8) or arr.ndim > 8:
        return np.ascontiguousarray(arr.transpose(perm))
    return _native.transpose(arr, [int(p) for p in perm])
