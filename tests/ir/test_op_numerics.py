"""Every registry op numerically through the simulator against a float64 numpy reference.

Tolerance: fp16 storage rounds each op result with relative error <= 2^-11; the bound used is
4·2^-10 relative to max(|ref|, max|ref|/8) plus 1e-3 absolute (compiler_helpers.assert_fp16_close),
tighter checks are stated where an op is exact.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from compiler_helpers import assert_fp16_close, run_sim, rng  # noqa: F401 (fixture)
from orion.compiler import lower
from orion.ir import OPS, Graph, GraphError, ops
from orion.ir.ops import SCHEMA

S = 32


def _graph(*shapes, positive=False, rng=None):
    g = Graph("op")
    ins, arrays = [], {}
    for i, shape in enumerate(shapes):
        name = "xyzw"[i]
        ins.append(g.input(name, shape))
        a = rng.standard_normal(shape)
        arrays[name] = (np.abs(a) + 0.1 if positive else a).astype(np.float16)
    return g, ins, arrays


def _check(g, arrays, ref, **kw):
    out = run_sim(g, arrays)
    assert_fp16_close(out["out"], ref, **kw)
    return out["out"]


BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide, "pow": np.power,
          "maximum": np.maximum, "minimum": np.minimum}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("yshape", [(1, 64, 1, S), (1, 64, 1, 1), (1, 1, 1, S)])
def test_binary(op, yshape, rng):
    g, (x, y), arrays = _graph((1, 64, 1, S), yshape, positive=op in ("pow", "real_div"), rng=rng)
    if op == "pow":
        arrays["y"] = (arrays["y"] % 2).astype(np.float16)
    g.output("out", getattr(ops, op)(x, y))
    x64, y64 = (arrays[k].astype(np.float64) for k in "xy")
    _check(g, arrays, BINARY[op](x64, y64))


UNARY = {
    "exp": np.exp, "sqrt": np.sqrt, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0), "rsqrt": lambda x: 1 / np.sqrt(x),
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1 + np.exp(-x)), "log": np.log,
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op, rng):
    g, (x,), arrays = _graph((1, 64, 1, S), positive=op in ("sqrt", "rsqrt", "log"), rng=rng)
    g.output("out", getattr(ops, op)(x))
    _check(g, arrays, UNARY[op](arrays["x"].astype(np.float64)))


def test_clip(rng):
    g, (x,), arrays = _graph((1, 64, 1, S), rng=rng)
    g.output("out", ops.clip(x, -0.5, 0.75))
    _check(g, arrays, np.clip(arrays["x"].astype(np.float64), -0.5, 0.75), rtol=0, atol=0)


def test_log_epsilon(rng):
    g, (x,), arrays = _graph((1, 64, 1, S), positive=True, rng=rng)
    g.output("out", ops.log(x, epsilon=0.25))
    _check(g, arrays, np.log(arrays["x"].astype(np.float64) + 0.25))


def _conv_ref(x, w, stride=1, pad=(0, 0, 0, 0), groups=1):
    x = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    cout, cpg, kh, kw = w.shape
    oh = (x.shape[2] - kh) // stride + 1
    ow = (x.shape[3] - kw) // stride + 1
    y = np.zeros((1, cout, oh, ow))
    opg = cout // groups
    for o in range(cout):
        gi = o // opg
        for i in range(oh):
            for j in range(ow):
                patch = x[0, gi * cpg:(gi + 1) * cpg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                y[0, o, i, j] = np.sum(patch * w[o])
    return y


@pytest.mark.parametrize("kind", ["1x1", "3x3_pad", "grouped", "strided"])
def test_conv(kind, rng):
    g = Graph()
    if kind == "1x1":
        xs, ws, kw = (1, 64, 1, S), (96, 64, 1, 1), {}
    elif kind == "3x3_pad":
        xs, ws, kw = (1, 8, 16, 16), (16, 8, 3, 3), {"pad_type": "custom", "pad": (1, 1, 1, 1)}
    elif kind == "grouped":
        xs, ws, kw = (1, 16, 4, 16), (32, 4, 1, 3), {"groups": 4}
    else:
        xs, ws, kw = (1, 8, 8, 16), (8, 8, 3, 3), {"strides": 2}
    x = g.input("x", xs)
    w = (rng.standard_normal(ws) / math.sqrt(np.prod(ws[1:]))).astype(np.float32)
    g.output("out", ops.conv(x, w, **kw))
    a = rng.standard_normal(xs).astype(np.float16)
    ref = _conv_ref(a.astype(np.float64), w.astype(np.float16).astype(np.float64), stride=kw.get("strides", 1),
                    pad=kw.get("pad", (0, 0, 0, 0)), groups=kw.get("groups", 1))
    _check(g, {"x": a}, ref)


def test_conv_bias_is_split(rng):
    g = Graph()
    x = g.input("x", (1, 32, 1, S))
    w = rng.standard_normal((48, 32, 1, 1)).astype(np.float32) * 0.2
    b = rng.standard_normal(48).astype(np.float32)
    g.output("out", ops.conv(x, w, bias=b))
    a = rng.standard_normal((1, 32, 1, S)).astype(np.float16)
    ref = np.einsum("oc,cs->os", w[:, :, 0, 0].astype(np.float16).astype(np.float64),
                    a[0, :, 0, :].astype(np.float64))[None, :, None, :] + b.reshape(1, 48, 1, 1)
    _check(g, {"x": a}, ref)


@pytest.mark.parametrize("tx,ty", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul(tx, ty, rng):
    xs = (1, 4, 32, 16) if not tx else (1, 4, 16, 32)
    ys = (1, 1, 16, 64) if not ty else (1, 1, 64, 16)           # broadcast over the head axis
    g, (x, y), arrays = _graph(xs, ys, rng=rng)
    g.output("out", ops.matmul(x, y, transpose_x=tx, transpose_y=ty))
    a, b = arrays["x"].astype(np.float64), arrays["y"].astype(np.float64)
    ref = np.matmul(np.swapaxes(a, -1, -2) if tx else a, np.swapaxes(b, -1, -2) if ty else b)
    _check(g, arrays, ref)


@pytest.mark.parametrize("axis,shape", [(1, (1, 64, 1, S)), (-1, (1, 4, 16, 64)), (-1, (1, 4, 16, 48))])
def test_softmax(axis, shape, rng):
    g, (x,), arrays = _graph(shape, rng=rng)
    g.output("out", ops.softmax(x, axis=axis))
    a = arrays["x"].astype(np.float64)
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    _check(g, arrays, e / e.sum(axis=axis, keepdims=True), atol=2e-3)


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"])
@pytest.mark.parametrize("axes,keep", [((1,), True), ((3,), True), ((1, 3), True), ((1,), False)])
def test_reduce(op, axes, keep, rng):
    g, (x,), arrays = _graph((1, 64, 2, S), rng=rng)
    y = getattr(ops, op)(x, axes, keep_dims=keep)
    if not keep:
        y = ops.reshape(y, (1, 1) + y.shape[1:]) if y.rank == 3 else y
    g.output("out", y)
    fn = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min,
          "reduce_prod": np.prod}[op]
    if op == "reduce_prod":                      # keep the product of up to 64 factors inside fp16
        arrays["x"] = (1 + 0.02 * arrays["x"]).astype(np.float16)
    ref = fn(arrays["x"].astype(np.float64), axis=axes, keepdims=keep)
    _check(g, arrays, ref.reshape(y.shape), scale=4.0)


def test_reshape_transpose(rng):
    g, (x,), arrays = _graph((1, 64, 1, S), rng=rng)
    y = ops.transpose(ops.reshape(x, (1, 4, 16, S)), (0, 1, 3, 2))
    g.output("out", ops.reshape(y, (1, 64, 1, S)))
    ref = arrays["x"].reshape(1, 4, 16, S).transpose(0, 1, 3, 2).reshape(1, 64, 1, S)
    _check(g, arrays, ref.astype(np.float64), rtol=0, atol=0)


def test_slices(rng):
    g, (x,), arrays = _graph((1, 64, 1, 64), rng=rng)
    a = ops.slice_by_size(x, (0, 16, 0, 0), (1, 32, 1, 64))
    b = ops.slice_by_index(x, (0, 0, 0, 0), (1, 64, 1, 64), (1, 2, 1, 1))
    g.output("out", ops.add(a, b))
    xa = arrays["x"].astype(np.float64)
    _check(g, arrays, xa[:, 16:48] + xa[:, ::2])


def test_getitem_sugar(rng):
    g, (x,), arrays = _graph((1, 64, 1, 64), rng=rng)
    g.output("out", x[:, 8:40] * 2.0)
    _check(g, arrays, arrays["x"][:, 8:40].astype(np.float64) * 2, rtol=0, atol=0)


def test_cast_fp32_io(rng):
    g = Graph()
    x = g.input("x", (1, 64, 1, S), dtype="fp32")
    g.output("out", ops.mul(x, 3.0), dtype="fp32")
    a = rng.standard_normal((1, 64, 1, S)).astype(np.float32)
    out = run_sim(g, {"x": a})["out"]
    assert out.dtype == np.float32
    assert_fp16_close(out, a.astype(np.float16).astype(np.float64) * 3)


def test_identity_output_of_input(rng):
    g, (x,), arrays = _graph((1, 64, 1, S), rng=rng)
    g.output("out", ops.identity(x))
    _check(g, arrays, arrays["x"].astype(np.float64), rtol=0, atol=0)


def test_concat_output(rng):
    g, (x, y), arrays = _graph((1, 64, 1, S), (1, 32, 1, S), rng=rng)
    g.output("out", ops.concat([ops.mul(x, 2.0), y], axis=1))
    ref = np.concatenate([arrays["x"] * 2, arrays["y"]], axis=1).astype(np.float64)
    _check(g, arrays, ref, rtol=0, atol=0)


def test_sdpa_with_mask(rng):
    g, (q, k, v), arrays = _graph((1, 4, 32, 16), (1, 4, 32, 16), (1, 4, 32, 16), rng=rng)
    mask = np.triu(np.full((32, 32), -1e4, np.float32), 1).reshape(1, 1, 32, 32)
    g.output("out", ops.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    a, b, c = (arrays[n].astype(np.float64) for n in "xyz")
    s = a @ np.swapaxes(b, -1, -2) / 4 + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    _check(g, arrays, (p / p.sum(-1, keepdims=True)) @ c)


def test_gather(rng):
    """Rows picked by a baked int32 index vector (negative = from the end): exact, it only moves data."""
    g, (x,), arrays = _graph((1, 64, 1, S), rng=rng)
    idx = [0, 5, 63, -1, 2, 2, 40, 1]
    g.output("out", ops.gather(x, idx, axis=1))
    _check(g, arrays, np.take(arrays["x"].astype(np.float64), idx, axis=1), rtol=0, atol=0)


def test_select(rng):
    """cond ? a : b with a bool const broadcast along the channels: exact."""
    g, (x, y), arrays = _graph((1, 64, 1, S), (1, 64, 1, S), rng=rng)
    cond = (np.arange(S) % 3 == 0).reshape(1, 1, 1, S)
    g.output("out", ops.select(cond, x, y))
    _check(g, arrays, np.where(cond, arrays["x"], arrays["y"]).astype(np.float64), rtol=0, atol=0)


@pytest.mark.parametrize("lower,upper", [(0, -1), (-1, 0), (2, 1)])
def test_band_part(lower, upper, rng):
    g, (x,), arrays = _graph((1, 2, S, S), rng=rng)
    g.output("out", ops.band_part(x, lower, upper))
    i, j = np.arange(S)[:, None], np.arange(S)[None, :]
    keep = ((lower < 0) | (i - j <= lower)) & ((upper < 0) | (j - i <= upper))
    _check(g, arrays, np.where(keep, arrays["x"], 0).astype(np.float64), rtol=0, atol=0)


def test_split_one_part(rng):
    """The one-part form the simulator runs; more parts are refused at build with the reason."""
    g, (x,), arrays = _graph((1, 64, 1, S), rng=rng)
    (y,) = ops.split(x, axis=1)
    g.output("out", ops.mul(y, 2.0))
    _check(g, arrays, arrays["x"].astype(np.float64) * 2, rtol=0, atol=0)
    with pytest.raises(GraphError, match="split into 2 parts .*use slice_by_size"):
        ops.split(x, axis=1, num_splits=2)


def test_layer_norm_op(rng):
    """The fused MIL layer_norm (fp32 statistics, one rounding) against float64 numpy over the channels."""
    from orion.ir.ops import normalization
    g, (x,), arrays = _graph((1, 64, 1, S), rng=rng)
    gamma = rng.uniform(0.5, 1.5, 64).astype(np.float32)
    beta = (rng.standard_normal(64) * 0.1).astype(np.float32)
    g.output("out", normalization.layer_norm(x, [1], gamma=gamma, beta=beta, epsilon=1e-3))
    a = arrays["x"].astype(np.float64)
    xc = a - a.mean(axis=1, keepdims=True)
    ref = xc / np.sqrt((xc ** 2).mean(axis=1, keepdims=True) + 1e-3)
    ref = ref * gamma.astype(np.float16).reshape(1, 64, 1, 1) + beta.astype(np.float16).reshape(1, 64, 1, 1)
    _check(g, arrays, ref)


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantize_dequantize(per_channel, rng):
    """int8 round trip: round-half-even(x / scale) + zp clamped to [-128, 127] (coremltools' order: ties with
    an odd zp, plentiful at scale 2^-5, pin it), then (q - zp) * scale; equal to the numpy result up to the
    final fp16 rounding."""
    g, (x,), arrays = _graph((1, 64, 1, S), rng=rng)
    if per_channel:
        scale = (0.01 + 0.001 * np.arange(64)).astype(np.float16)
        zp = (np.arange(64) % 5 - 2).astype(np.int8)
        kw = {"axis": 1}
        sb, zb = scale.astype(np.float64).reshape(1, 64, 1, 1), zp.astype(np.float64).reshape(1, 64, 1, 1)
    else:
        scale, zp, kw = np.float16(0.03125), np.int8(3), {}
        sb, zb = float(scale), 3.0
    q = ops.quantize(x, scale, "int8", zero_point=zp, **kw)
    assert q.dtype == "int8"
    g.output("out", ops.dequantize(q, scale, zero_point=zp, **kw))
    a = arrays["x"].astype(np.float64)
    ref = (np.clip(np.rint(a / sb) + zb, -128, 127) - zb) * sb
    _check(g, arrays, ref, rtol=2 ** -11, atol=0)


def test_constexpr_affine_dequantize(rng):
    """int8 weights dequantised by the compiler: y = conv(x, (q - zp) * scale) with the weight folded."""
    g, (x,), arrays = _graph((1, 64, 1, S), rng=rng)
    q = rng.integers(-128, 128, (32, 64, 1, 1)).astype(np.int8)
    scale = rng.uniform(0.001, 0.004, 32).astype(np.float16)
    w = ops.constexpr_affine_dequantize(g, q, scale, zero_point=1, axis=0)
    assert w.shape == (32, 64, 1, 1) and w.dtype == "fp16"
    g.output("out", ops.conv(x, w))
    assert "weight = constexpr_affine_dequantize" in lower(g).mil       # stays a baked conv weight, no matmul
    wd = ((q.astype(np.float64) - 1) * scale.astype(np.float64).reshape(32, 1, 1, 1)).astype(np.float16)
    ref = np.einsum("oc,cs->os", wd[:, :, 0, 0].astype(np.float64), arrays["x"][0, :, 0, :].astype(np.float64))
    _check(g, arrays, ref[None, :, None, :])


def test_registry_entries_are_complete():
    for name, d in OPS.items():
        assert d.ane, f"{name}: missing ANE notes"
        assert d.mil or name == "input", f"{name}: no MIL spelling"
        assert d.category == "source" or name in SCHEMA, f"{name}: its type rule is the registry's"


@pytest.mark.parametrize("groups,stride", [(1, 1), (2, 2)])
def test_the_reference_conv_is_the_float64_sum(groups, stride, rng):
    """The float64 reference interpreter's conv (BLAS products over blocks of output channels: more channels
    than one block here) is the direct sum to float64 precision."""
    from orion.ir.reference import evaluate
    cin, cout = 8, 1100
    g = Graph()
    x = g.input("x", (1, cin, 5, 6))
    w = rng.standard_normal((cout, cin // groups, 3, 2)).astype(np.float16).astype(np.float32)
    g.output("out", ops.conv(x, w, strides=stride, groups=groups))
    a = rng.standard_normal((1, cin, 5, 6))
    got = evaluate(g, {"x": a})["out"]
    ref = _conv_ref(a, w.astype(np.float64), stride=stride, pad=(0, 0, 0, 0), groups=groups)
    assert got.dtype == np.float64 and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-12)
