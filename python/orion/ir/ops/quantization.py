"""Affine quantisation: quantize (float -> int8/uint8), dequantize, and constexpr_affine_dequantize (int8
weights dequantised at compile time — on the ANE too; no compute speed-up, C47)."""

from __future__ import annotations

import numpy as np

from ...errors import QuantizationError
from ...quant import BlockwiseQuantized, LutQuantized
from ..graph import GraphError, Value
from ._core import REQUIRED, _axis, builder, define, make

_RANGE = {"int8": (-128, 127), "uint8": (0, 255)}


def _affine_shape(op, x, a, scale, zero_point):
    """Per-tensor (scalar) or per-channel (rank-1 along ``axis``) parameters, as the simulator checks them."""
    for what, v in (("scale", scale), ("zero_point", zero_point)):
        if v is None:
            continue
        n = int(np.prod(v.shape))
        if len(v.shape) > 1 or (n > 1 and (a.get("axis") is None or n != x.shape[a["axis"]])):
            raise GraphError(f"{op}: {what} must be a scalar, or rank-1 with x.shape[axis] values and axis given; "
                             f"got shape {list(v.shape)} for {list(x.shape)}, axis={a.get('axis')}")


def _bcast(p, x_ndim, axis):
    p = np.asarray(p, np.float64)
    if p.size <= 1:
        return p.reshape(())
    return p.reshape(tuple(-1 if k == axis else 1 for k in range(x_ndim)))


def _infer_quantize(i, a):
    x, s = i["input"], i["scale"]
    if a["output_dtype"] not in _RANGE:
        raise GraphError(f"quantize: output_dtype must be 'int8' or 'uint8', got {a['output_dtype']!r}")
    if s.dtype != x.dtype or x.dtype not in ("fp16", "fp32"):
        raise GraphError(f"quantize: input must be float and scale of its dtype, got {x!r}, scale {s!r}")
    if "zero_point" in i and i["zero_point"].dtype != a["output_dtype"]:
        raise GraphError(f"quantize: zero_point must be {a['output_dtype']}, got {i['zero_point']!r}")
    _affine_shape("quantize", x, a, s, i.get("zero_point"))
    return [(x.shape, a["output_dtype"])]


def _ev_quantize(i, a):
    x = i["input"]
    ax = a.get("axis")
    zp = _bcast(i["zero_point"], x.ndim, ax) if "zero_point" in i else 0.0
    lo, hi = _RANGE[a["output_dtype"]]
    with np.errstate(all="ignore"):
        return [np.clip(np.rint(x / _bcast(i["scale"], x.ndim, ax)) + zp, lo, hi)]


define("quantize", _infer_quantize, _ev_quantize, "W8A8 1.85-1.88x on M4 (maderix int8 bench)",
       attrs={"output_dtype": REQUIRED, "axis": None})


def _infer_dequantize(i, a):
    q, s = i["input"], i["scale"]
    if s.dtype not in ("fp16", "fp32"):
        raise GraphError(f"dequantize: scale must be fp16 or fp32, got {s!r}")
    if "zero_point" in i and i["zero_point"].dtype != q.dtype:
        raise GraphError(f"dequantize: zero_point must be {q.dtype}, got {i['zero_point']!r}")
    _affine_shape("dequantize", q, a, s, i.get("zero_point"))
    return [(q.shape, s.dtype)]


def _ev_dequantize(i, a):
    q = i["input"]
    ax = a.get("axis")
    zp = _bcast(i["zero_point"], q.ndim, ax) if "zero_point" in i else 0.0
    return [(q - zp) * _bcast(i["scale"], q.ndim, ax)]


define("dequantize", _infer_dequantize, _ev_dequantize, "", attrs={"axis": None})


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


def _infer_constexpr(i, a):
    q, s, z = (np.asarray(a[k]) for k in ("quantized_data", "scale", "zero_point"))
    if q.dtype not in (np.int8, np.uint8) or z.dtype != q.dtype:
        raise GraphError(f"constexpr_affine_dequantize: quantized_data and zero_point must both be int8 or uint8, "
                         f"got {q.dtype} and {z.dtype}")
    ax = _axis("constexpr_affine_dequantize", a["axis"], q.ndim, q.shape)
    for what, v in (("scale", s), ("zero_point", z)):
        if v.ndim > 1 or v.size not in (1, q.shape[ax]):
            raise GraphError(f"constexpr_affine_dequantize: {what} must be a scalar or have {q.shape[ax]} values "
                             f"(quantized_data axis {ax}), got shape {list(v.shape)}")
    return [(tuple(q.shape), "fp16")]


def _ev_constexpr(i, a):
    q = np.asarray(a["quantized_data"], np.float64)
    ax = a["axis"] % q.ndim
    return [(q - _bcast(a["zero_point"], q.ndim, ax)) * _bcast(a["scale"], q.ndim, ax)]


define("constexpr_affine_dequantize", _infer_constexpr, _ev_constexpr,
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
    try:
        if op == "constexpr_lut_to_dense":
            return LutQuantized(a["indices"], np.asarray(a["lut"], np.float16))
        return BlockwiseQuantized(a["data"], np.asarray(a["scale"], np.float16), a.get("offset"))
    except (QuantizationError, AttributeError, TypeError) as e:
        raise GraphError(f"{op}: {e}") from None


def _infer_compressed(op):
    def infer(i, a):
        return [(tuple(_quantized(op, a).shape), "fp16")]
    return infer


def _ev_compressed(op):
    def ev(i, a):
        return [_quantized(op, a).dequantize().astype(np.float64)]
    return ev


define("constexpr_lut_to_dense", _infer_compressed("constexpr_lut_to_dense"), _ev_compressed("constexpr_lut_to_dense"),
       "iOS18 palettized weight: uint1..uint8 indices into fp16 tables per block of output channels",
       attrs={"indices": REQUIRED, "lut": REQUIRED})
define("constexpr_blockwise_shift_scale", _infer_compressed("constexpr_blockwise_shift_scale"),
       _ev_compressed("constexpr_blockwise_shift_scale"),
       "iOS18 blockwise int4/int8 weight: scale (and offset) per block", attrs={"data": REQUIRED, "scale": REQUIRED,
                                                                               "offset": None})


@builder
def constexpr_lut_to_dense(graph, indices, lut, name=None) -> Value:
    """An fp16 constant ``lut[block, indices]`` (iOS18, scalar tables): ``indices`` an
    :class:`orion.quant.PackedInts` (uint1..uint8), ``lut`` fp16 ``[groups..., 2**bits, 1]`` as
    :func:`orion.quant.palettize` makes them. Operands go to the weight blob file."""
    return make("constexpr_lut_to_dense", {}, {"indices": indices, "lut": np.asarray(lut, np.float16)}, name=name,
                graph=graph)


@builder
def constexpr_blockwise_shift_scale(graph, data, scale, offset=None, name=None) -> Value:
    """An fp16 constant ``scale * (data - offset)`` per block (iOS18): ``data``/``offset``
    :class:`orion.quant.PackedInts` (int4/uint4/int8/uint8), ``scale`` fp16 of the data's rank, as
    :func:`orion.quant.quantize_blockwise` makes them. Operands go to the weight blob file."""
    return make("constexpr_blockwise_shift_scale", {}, {"data": data, "scale": np.asarray(scale, np.float16),
                                                        "offset": offset}, name=name, graph=graph)
