"""Affine quantisation: quantize (float -> int8/uint8), dequantize, and constexpr_affine_dequantize (int8
weights dequantised at compile time — on the ANE too; no compute speed-up, C47)."""

from __future__ import annotations

import numpy as np

from ...errors import QuantizationError
from ...quant import BlockwiseQuantized, LutQuantized, PackedInts
from ..graph import GraphError, Value
from ._core import REQUIRED, _axis, builder, define, make

_RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def _bcast(p, x_ndim, axis):
    p = np.asarray(p, np.float64)
    if p.size <= 1:
        return p.reshape(())
    return p.reshape(tuple(-1 if k == axis else 1 for k in range(x_ndim)))


def _ev_quantize(i, a):
    x = i["input"]
    ax = a.get("axis")
    zp = _bcast(i["zero_point"], x.ndim, ax) if "zero_point" in i else 0.0
    lo, hi = _RANGE[a["output_dtype"]]
    with np.errstate(all="ignore"):
        return [np.clip(np.rint(x / _bcast(i["scale"], x.ndim, ax)) + zp, lo, hi)]


define("quantize", _ev_quantize, "W8A8 1.85-1.88x on M4 (maderix int8 bench)",
       attrs={"output_dtype": REQUIRED, "axis": None})


def _ev_dequantize(i, a):
    q = i["input"]
    ax = a.get("axis")
    zp = _bcast(i["zero_point"], q.ndim, ax) if "zero_point" in i else 0.0
    return [(q - zp) * _bcast(i["scale"], q.ndim, ax)]


define("dequantize", _ev_dequantize, "", attrs={"axis": None})


def _params(like: Value, scale, zero_point, zp_dtype, op):
    g = like.node.graph
    if isinstance(scale, Value):
        s = scale
    else:
        s = g.const(np.asarray(scale, np.float32), dtype=like.dtype if like.dtype in ("fp16", "fp32") else "fp16")
    inputs = {"scale": s}
    if zero_point is not None:
        if zp_dtype not in _RANGE:
            raise GraphError(f"{op}: zero_point dtype {zp_dtype!r} must be int8 or uint8")
        inputs["zero_point"] = zero_point if isinstance(zero_point, Value) else \
            g.const(np.asarray(zero_point), dtype=zp_dtype, keep_dtype=False)
    return inputs


def _opt_axis(op, axis, x):
    return None if axis is None else _axis(op, int(axis), x.rank, x.shape)


@builder
def quantize(x: Value, scale, output_dtype: str = "int8", zero_point=None, axis: int | None = None, name=None) -> Value:
    """``clip(round_half_even(x / scale) + zero_point)`` as int8/uint8 (coremltools' formula) (only an intermediate: never program
    I/O, C39); scale and zero_point are consts, scalars or per-channel along ``axis``."""
    inputs = {"input": x, **_params(x, scale, zero_point, output_dtype, "quantize")}
    return make("quantize", inputs, {"output_dtype": output_dtype, "axis": _opt_axis("quantize", axis, x)}, name=name)


@builder
def dequantize(q: Value, scale, zero_point=None, axis: int | None = None, name=None) -> Value:
    """``(q - zero_point) * scale`` for an int8/uint8 ``q``; the result has the dtype of ``scale`` (fp16)."""
    inputs = {"input": q, **_params(q, scale, zero_point, q.dtype, "dequantize")}
    return make("dequantize", inputs, {"axis": _opt_axis("dequantize", axis, q)}, name=name)


def _ev_constexpr(i, a):
    q = np.asarray(a["quantized_data"], np.float64)
    ax = a["axis"] % q.ndim
    return [(q - _bcast(a["zero_point"], q.ndim, ax)) * _bcast(a["scale"], q.ndim, ax)]


define("constexpr_affine_dequantize", _ev_constexpr,
       "int8 weights dequantised by the compiler: no compute speed-up (numbers.md §8)",
       attrs={"quantized_data": REQUIRED, "zero_point": REQUIRED, "scale": REQUIRED, "axis": REQUIRED})


@builder
def constexpr_affine_dequantize(graph, quantized_data, scale, zero_point=0, axis: int = 0, name=None) -> Value:
    """An fp16 constant ``(quantized_data - zero_point) * scale`` that the compiler folds (int8/uint8 data);
    ``graph`` is the Graph it belongs to (the op has no tensor operands)."""
    q = np.ascontiguousarray(quantized_data)
    attrs = {"quantized_data": q, "scale": np.asarray(scale, np.float16),
             "zero_point": np.asarray(zero_point, dtype=q.dtype), "axis": int(axis)}
    return make("constexpr_affine_dequantize", {}, attrs, name=name, graph=graph)


# ---- iOS18 compressed weights: operands as orion.quant keeps them (PackedInts: packed sub-byte ints) ----

def _quantized(op: str, a: dict):
    """The orion.quant dataclass of a constexpr node's attributes (its checks are the op's layout rules)."""
    for k in ("indices", "data", "offset"):  # the packed payload the weight file stores
        if a.get(k) is not None and not isinstance(a[k], PackedInts):
            raise GraphError(f"{op}: {k} must be an orion.quant.PackedInts (PackedInts.pack(values, bits, signed)), "
                             f"got {type(a[k]).__name__}")
    try:
        if op == "constexpr_lut_to_dense":
            return LutQuantized(a["indices"], np.asarray(a["lut"], np.float16))
        return BlockwiseQuantized(a["data"], np.asarray(a["scale"], np.float16), a.get("offset"))
    except (QuantizationError, AttributeError, TypeError) as e:
        raise GraphError(f"{op}: {e}") from None


def _ev_compressed(op):
    def ev(i, a):
        return [_quantized(op, a).dequantize().astype(np.float64)]
    return ev


define("constexpr_lut_to_dense", _ev_compressed("constexpr_lut_to_dense"),
       "iOS18 palettized weight: uint1..uint8 indices into fp16 tables per block of output channels",
       attrs={"indices": REQUIRED, "lut": REQUIRED})
define("constexpr_blockwise_shift_scale", _ev_compressed("constexpr_blockwise_shift_scale"),
       "iOS18 blockwise int4/int8 weight: scale (and offset) per block", attrs={"data": REQUIRED, "scale": REQUIRED,
                                                                               "offset": None})


@builder
def constexpr_lut_to_dense(graph, indices, lut, name=None) -> Value:
    """An fp16 constant ``lut[block, indices]`` (iOS18, scalar tables): ``indices`` an
    :class:`orion.quant.PackedInts` (uint1..uint8), ``lut`` fp16 ``[groups..., 2**bits, 1]`` as
    :func:`orion.quant.palettize` makes them. Operands go to the weight blob file."""
    attrs = {"indices": indices, "lut": np.asarray(lut, np.float16)}
    _quantized("constexpr_lut_to_dense", attrs)  # operands as orion.quant keeps them (PackedInts), or GraphError
    return make("constexpr_lut_to_dense", {}, attrs, name=name, graph=graph)


@builder
def constexpr_blockwise_shift_scale(graph, data, scale, offset=None, name=None) -> Value:
    """An fp16 constant ``scale * (data - offset)`` per block (iOS18): ``data``/``offset``
    :class:`orion.quant.PackedInts` (int4/uint4/int8/uint8), ``scale`` fp16 of the data's rank, as
    :func:`orion.quant.quantize_blockwise` makes them. Operands go to the weight blob file."""
    attrs = {"data": data, "scale": np.asarray(scale, np.float16), "offset": offset}
    _quantized("constexpr_blockwise_shift_scale", attrs)  # operands as orion.quant keeps them, or GraphError
    return make("constexpr_blockwise_shift_scale", {}, attrs, name=name, graph=graph)
