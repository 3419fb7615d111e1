"""check_weights: NaN/inf/out-of-fp16-range weights rejected (default) or warned about (C37)."""

from __future__ import annotations

import numpy as np
import pytest

from compiler_helpers import apply_passes
from orion.errors import InputError
from orion.ir import Graph, ops
from orion.passes import CompileWarning


def _g(value):
    g = Graph()
    x = g.input("x", (1, 4, 1, 16))
    g.output("y", ops.mul(x, g.weight("gain", np.asarray(value, np.float32).reshape(1, 4, 1, 1))))
    return g


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 70000.0])
def test_bad_weights_rejected_with_name_and_index(bad):
    with pytest.raises(InputError) as e:
        apply_passes(_g([1.0, 2.0, bad, 3.0]), "check_weights")
    msg = str(e.value)
    assert "'gain'" in msg and "index [0, 2, 0, 0]" in msg and "non_finite='warn'" in msg
    assert e.value.constraint == "C37"


def test_warn_mode():
    with pytest.warns(CompileWarning, match="gain"):
        apply_passes(_g([1.0, np.nan, 1.0, 1.0]), "check_weights", non_finite="warn")


def test_edge_of_fp16_range_is_fine():
    apply_passes(_g([65504.0, -65504.0, 65519.0, 6e-8]), "check_weights")
