"""transpose_quantized: the transposed compressed weight dequantizes to the transposed dense weight, exactly,
for every scheme (LUT groups end up along the new axis); a bad permutation is a QuantizationError."""

from __future__ import annotations

import numpy as np
import pytest

from orion.errors import QuantizationError
from orion.quant import palettize, quantize_blockwise, quantize_int8
from orion.quant.transpose import transpose_quantized

W = (np.random.default_rng(0).standard_normal((48, 40)) * 0.1).astype(np.float16)
CASES = {"int8": lambda: quantize_int8(W), "uint8": lambda: quantize_int8(W, symmetric=False),
         "lut4_g16": lambda: palettize(W, 4, group_size=16), "lut3": lambda: palettize(W, 3),
         "int4_b8": lambda: quantize_blockwise(W, 4, block_size=8),
         "uint4_b8": lambda: quantize_blockwise(W, 4, block_size=8, symmetric=False)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_transposed_dequantizes_to_the_transpose(case):
    q = CASES[case]()
    t = transpose_quantized(q, (1, 0))
    assert t.shape == (40, 48) and t.nbytes == q.nbytes
    assert np.array_equal(t.dequantize(), q.dequantize().T)
    assert np.array_equal(t.expand_rank(4).dequantize()[:, :, 0, 0], q.dequantize().T)
    assert np.array_equal(transpose_quantized(t, (1, 0)).dequantize(), q.dequantize())


def test_bad_permutation():
    with pytest.raises(QuantizationError, match="not a permutation"):
        transpose_quantized(quantize_int8(W), (0, 0))
