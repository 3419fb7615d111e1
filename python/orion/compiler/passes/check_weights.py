"""Weight sanity: every float constant must be finite and representable in fp16 (|x| <= 65,504, C37).

A NaN/inf or an overflowing weight becomes inf/NaN on the device and spreads through softmax and the
loss. ``non_finite="error"`` (default) raises InputError naming the weight; ``"warn"`` warns and keeps it
(the value is baked as the fp16 conversion gives it). The fp16 copy made here is reused by the codegen.
"""

from __future__ import annotations

import numpy as np

from ...errors import InputError
from ...ir.graph import Graph
from ...native import convert
from .context import CompileContext

FP16_MAX = 65504.0
FP16_ROUNDS_TO_MAX = 65519.99  # larger magnitudes round to inf in fp16


def to_fp16(node) -> np.ndarray:
    """The fp16 array the codegen bakes for a const node (converted once, cached on the node)."""
    cached = node.attrs.get("_fp16")
    if cached is None:
        cached = node.attrs["_fp16"] = convert.to_fp16(node.attrs["value"])
    return cached


def fits_fp16(arr: np.ndarray) -> bool:
    """No NaN/inf and nothing that rounds beyond +-65504 (two reductions: cheaper than an fp16 scan)."""
    if arr.size == 0:
        return True
    if arr.dtype == np.float16:
        return finite_fp16(arr)
    lo, hi = arr.min(), arr.max()             # NaN propagates and fails both comparisons
    return bool(-FP16_ROUNDS_TO_MAX <= lo and hi <= FP16_ROUNDS_TO_MAX)


def finite_fp16(arr: np.ndarray, chunk: int = 1 << 20) -> bool:
    """Whether every value of an fp16 array is finite (all finite fp16 values fit): its bits with the sign cleared
    stay below inf's, an integer reduction a chunk at a time (numpy's fp16 min / max convert element by element:
    0.17 s for a 1B model's 16M-value matrix, of which a load checks dozens)."""
    bits = arr.reshape(-1).view(np.uint16)
    return all(int((bits[i:i + chunk] & 0x7FFF).max()) < 0x7C00 for i in range(0, bits.size, chunk))


def rounds_finite(arr: np.ndarray) -> bool:
    """Whether ``arr`` rounded to fp16 (as the runtime stages it) holds no NaN or inf: :func:`fits_fp16` first, and
    numpy's fp16 rounding itself only where its bound is not met (|x| in (65519.99, 65520) still rounds to 65504)."""
    if fits_fp16(arr):
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(arr.astype(np.float16, copy=False)).all())


def describe_bad(arr: np.ndarray, ref: np.ndarray) -> str:
    bad = ~np.isfinite(arr)
    i = int(np.flatnonzero(bad.ravel())[0])
    idx = np.unravel_index(i, arr.shape) if arr.ndim else ()
    return (f"{int(bad.sum())} of {arr.size} values are NaN, inf or beyond the fp16 range +-65504; first at "
            f"index {list(map(int, idx))}: {ref.ravel()[i]!r}")


def run(graph: Graph, ctx: CompileContext) -> None:
    for node in graph.nodes:
        if node.op != "const" or node.out.dtype not in ("fp16", "fp32"):
            continue
        value = np.asarray(node.attrs["value"])
        if fits_fp16(value):
            continue
        h = to_fp16(node)
        if not np.isfinite(h).all():
            label = node.attrs.get("weight") or node.name or f"constant {node.out!r}"
            msg = f"weight {label!r}: " + describe_bad(h, np.asarray(node.attrs["value"]))
            if ctx.options.non_finite == "error":
                err = InputError(msg + " (pass non_finite='warn' to compile anyway) [C37]")
                err.constraint = "C37"
                raise err
            ctx.warn(msg, "C37")
