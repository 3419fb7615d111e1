"""The CPU classifier's weight (the vocabulary projection ``W [V, d]``, the tied embedding in most models) in the
form the native packed-weight GEMM reads in place (``_native.gemm_panels_f16``): logits in fp32 from the fp16
hidden state, on orion's threads (no BLAS pool spinning between the stage programs).

- ``"fp16"``: 16-row panels of its fp16 values, k-major ``[ceil(V/16), d, 16]`` - the exact classifier.
- ``"int8"``: a ``_native.CompressedWeight`` of its rows quantized to int8 (:func:`orion.quant.quantize_int8`:
  symmetric, one fp16 scale per row), decoded in the GEMV's registers: half the bytes of the fp16 panels, and half
  the memory traffic of every token's logits (at the 1B shape, 501 MB of 2.7 GB resident, and the biggest single
  read of a decode step). The default of a model whose layers are compressed (``load(..., quantize=...)``), lut4
  included: a 4-bit classifier costs the most quality for its bytes (llama.cpp keeps its output matrix at 6 bits
  or more for its 4-bit types), 8 bits per row is within a few 1e-3 of the fp16 logits.

Both are built a block of ``BLOCK_ROWS`` rows at a time into the result, ``release()`` after each block handing
back the pages of ``W``'s mapped file it read (:mod:`.host_pages`): never a whole copy of ``W`` beside the result.
"""

from __future__ import annotations

import numpy as np

from .. import _native
from ..errors import InputError
from ..native.convert import fp16_to_codes
from ..quant.int8 import symmetric_row_scales

WEIGHTS = ("fp16", "int8")
BLOCK_ROWS = 4096          # a multiple of 16: each block fills whole panels
_EMPTY16 = np.zeros(0, np.float16)
_EMPTY32 = np.zeros(0, np.float32)


def check_weights(kind) -> str:
    if kind not in WEIGHTS:
        raise InputError(f"classifier_weights must be one of {', '.join(WEIGHTS)}, got {kind!r}")
    return kind


def build(W, kind: str, release=None):
    """``W [V, d]`` as the CPU classifier of ``kind`` (module docstring)."""
    return fp16_panels(W, release) if check_weights(kind) == "fp16" else int8_weight(W, release)


def nbytes(kind: str, V: int, d: int) -> int:
    """What :func:`build` holds for a ``[V, d]`` classifier: fp16 rows padded to panels of 16, or int8 codes (in
    panels of 16 rows, 8 bytes of slack) and a float32 scale per row."""
    if check_weights(kind) == "fp16":
        return -(-V // 16) * 16 * d * 2
    return -(-V // 16) * 16 * d + 8 + 4 * V


def held_bytes(weight) -> int:
    """The bytes of a built classifier (either kind)."""
    return int(weight.nbytes)


def _blocks(V: int):
    for r0 in range(0, V, BLOCK_ROWS):
        yield r0, min(V, r0 + BLOCK_ROWS)


def fp16_panels(W, release=None) -> np.ndarray:
    """``W [V, d]`` -> fp16 ``[ceil(V/16), d, 16]``: 16-row panels stored k-major, the last one's rows past ``V``
    zero."""
    if not isinstance(W, np.ndarray):
        W = np.asarray(W)
    V, d = W.shape
    n = -(-V // 16)
    P = np.empty((n, d, 16), np.float16)
    for r0, r1 in _blocks(V):
        rows = np.asarray(W[r0:r1], np.float16)
        full = (r1 - r0) // 16
        P[r0 // 16:r0 // 16 + full] = rows[:full * 16].reshape(full, 16, d).transpose(0, 2, 1)
        if full * 16 < r1 - r0:                  # the last panel: zero rows below the vocabulary
            last = np.zeros((16, d), np.float16)
            last[:r1 - r0 - full * 16] = rows[full * 16:]
            P[r0 // 16 + full] = last.T
        if release is not None:
            release()
    return P


def int8_weight(W, release=None):
    """``W [V, d]`` -> a ``_native.CompressedWeight`` of :func:`orion.quant.quantize_int8` of its rows (the same codes
    and scales as quantizing ``W`` whole: each row is quantized on its own, by the same two functions). Two passes
    over the blocks: the scales (the weight takes them when made), then the codes, set a block of rows at a time."""
    if not isinstance(W, np.ndarray):
        W = np.asarray(W)
    V, d = W.shape
    scale = np.empty(V, np.float16)
    for r0, r1 in _blocks(V):
        scale[r0:r1] = symmetric_row_scales(np.asarray(W[r0:r1], np.float16))
        if release is not None:
            release()
    cw = _native.compressed_weight("shift_scale", np.zeros(0, np.uint8), V, d, 8, True, 1, 1, _EMPTY16,
                                   scale.astype(np.float32), _EMPTY32)
    for r0, r1 in _blocks(V):
        cw.set_rows(r0, fp16_to_codes(np.asarray(W[r0:r1], np.float16), scale[r0:r1]).view(np.uint8).reshape(-1))
        if release is not None:
            release()
    return cw
