"""Every simulator op against a float64 numpy reference computed from the same fp16 inputs.

Tolerances: the simulator rounds each op result once to fp16 (C37) from fp32 arithmetic, so
element-wise ops must be within 1 fp16 ulp of the exact result; accumulating ops (conv, matmul,
reductions, norms, softmax, attention) within 1 ulp + a small relative term for fp32 accumulation and,
where the ANE rounds intermediates (attention scores), a few ulps.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from simutil import (assert_fp16_close, blob_const, blob_file, const, f16, program, ref, run, stmt, tlit)

rng = np.random.default_rng(1234)
X4 = [1, 4, 1, 8]


def randn(*shape, scale=1.0):
    return f16(rng.standard_normal(shape) * scale)


def unary_prog(op, shape, extra_body=(), **args):
    body = list(extra_body) + [stmt("y", "fp16", shape, op, x="x", **args)]
    return program({"x": ("fp16", shape)}, body, ["y"])


# ---- element-wise binary ---------------------------------------------------------------------------

BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "real_div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("yshape", [[1, 4, 1, 8], [1, 1, 1, 8], [1, 4, 1, 1], [8], [4, 1, 1]])
def test_binary_broadcast(op, yshape):
    x = randn(*X4)
    y = randn(*yshape)
    if op == "real_div":
        y = f16(np.where(np.abs(y) < 0.1, 0.5, y))
    out_shape = list(np.broadcast_shapes(tuple(X4), tuple(yshape)))
    text = program({"x": ("fp16", X4), "y": ("fp16", yshape)}, [stmt("z", "fp16", out_shape, op, x="x", y="y")], ["z"])
    o, w = run(text, inputs={"x": x, "y": y})
    assert_fp16_close(o["z"], BINARY[op](ref(x), ref(y)))
    assert w == []


def test_binary_broadcast_both_sides():
    x, y = randn(1, 4, 1, 1), randn(1, 1, 3, 8)
    text = program({"x": ("fp16", [1, 4, 1, 1]), "y": ("fp16", [1, 1, 3, 8])},
                   [stmt("z", "fp16", [1, 4, 3, 8], "mul", x="x", y="y")], ["z"])
    o, _ = run(text, inputs={"x": x, "y": y})
    assert_fp16_close(o["z"], ref(x) * ref(y))


def test_binary_scalar_const_and_inline_literal():
    x = randn(*X4)
    text = program({"x": ("fp16", X4)}, [
        const("c", 0.25, "fp16"),
        stmt("a", "fp16", X4, "mul", x="x", y="c"),
        stmt("z", "fp16", X4, "sub", x="a", y="fp16(1.5)"),
    ], ["z"])
    o, _ = run(text, inputs={"x": x})
    a = f16(ref(x) * 0.25)
    assert_fp16_close(o["z"], ref(a) - 1.5)


def test_pow_rsqrt_pattern():
    x = f16(rng.uniform(0.1, 50, X4))
    text = program({"x": ("fp16", X4)}, [const("nh", -0.5, "fp16"), stmt("y", "fp16", X4, "pow", x="x", y="nh")], ["y"])
    o, _ = run(text, inputs={"x": x})
    assert_fp16_close(o["y"], ref(x) ** -0.5)


def test_binary_overflow_inf_nan():
    # C37: fp16 overflow -> inf (60000 + 60000), inf - inf -> nan, tiny * tiny -> 0, subnormals kept
    x = f16([60000, -60000, np.inf, 1e-4, 6e-8, np.nan, 2.0, -0.0])
    y = f16([60000, -60000, np.inf, 1e-4, 1.0, 1.0, 3.0, 0.0])
    text = program({"x": ("fp16", [8]), "y": ("fp16", [8])}, [
        stmt("s", "fp16", [8], "add", x="x", y="y"),
        stmt("d", "fp16", [8], "sub", x="x", y="y"),
        stmt("m", "fp16", [8], "mul", x="x", y="y"),
    ], ["d", "m", "s"])
    o, _ = run(text, inputs={"x": x, "y": y})
    with np.errstate(all="ignore"):
        assert_fp16_close(o["s"], f16(ref(x) + ref(y)))
        assert_fp16_close(o["d"], f16(ref(x) - ref(y)))
        assert_fp16_close(o["m"], f16(ref(x) * ref(y)))
    assert np.isinf(o["s"][0]) and o["s"][0] > 0 and np.isinf(o["s"][1]) and o["s"][1] < 0
    assert np.isnan(o["d"][2])
    assert o["m"][3] == 0  # 1e-8 underflows fp16 (C37)
    assert o["m"][4] == f16(6e-8)  # subnormal survives


def test_binary_large_and_small_magnitudes():
    x = f16(rng.uniform(-30000, 30000, [64]))
    y = f16(rng.uniform(-1e-3, 1e-3, [64]))
    text = program({"x": ("fp16", [64]), "y": ("fp16", [64])}, [
        stmt("p", "fp16", [64], "mul", x="x", y="y"), stmt("q", "fp16", [64], "real_div", x="y", y="x")], ["p", "q"])
    o, _ = run(text, inputs={"x": x, "y": y})
    assert_fp16_close(o["p"], ref(x) * ref(y))
    assert_fp16_close(o["q"], ref(y) / ref(x))


# ---- unary -------------------------------------------------------------------------------------------

def _sigmoid(v):
    return 1 / (1 + np.exp(-v))


UNARY = {
    "sqrt": (np.sqrt, lambda s: f16(rng.uniform(0, 100, s))),
    "exp": (np.exp, lambda s: randn(*s, scale=3)),
    "tanh": (np.tanh, lambda s: randn(*s, scale=2)),
    "sigmoid": (_sigmoid, lambda s: randn(*s, scale=4)),
    "relu": (lambda v: np.maximum(v, 0), lambda s: randn(*s)),
    "silu": (lambda v: v * _sigmoid(v), lambda s: randn(*s, scale=3)),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op):
    fn, gen = UNARY[op]
    x = gen([2, 3, 5, 7])
    o, _ = run(unary_prog(op, [2, 3, 5, 7]), inputs={"x": x})
    assert_fp16_close(o["y"], fn(ref(x)), ulps=2)


def test_exp_overflow_and_sqrt_negative():
    x = f16([12.0, -20.0, 0.0, -1.0])
    o, _ = run(unary_prog("exp", [4]), inputs={"x": x})
    assert np.isinf(o["y"][0]) and o["y"][1] == 0 and o["y"][2] == 1
    with np.errstate(invalid="ignore"):
        o, _ = run(unary_prog("sqrt", [4]), inputs={"x": x})
    assert np.isnan(o["y"][3])


def test_log_epsilon():
    x = f16(rng.uniform(0.01, 100, [64]))
    o, _ = run(unary_prog("log", [64], [const("e", 0.0, "fp16")], epsilon="e"), inputs={"x": x})
    assert_fp16_close(o["y"], np.log(ref(x)), ulps=2)
    o, _ = run(unary_prog("log", [64], [const("e", 0.5, "fp16")], epsilon="e"), inputs={"x": x})
    assert_fp16_close(o["y"], np.log(ref(x) + 0.5), ulps=2)
    o, _ = run(unary_prog("log", [4]), inputs={"x": f16([0, 1, 2, 4])})  # default 1e-45 flushes to 0
    assert np.isneginf(o["y"][0])


def test_clip():
    x = randn(64, scale=5)
    text = unary_prog("clip", [64], [const("lo", -1.5, "fp16"), const("hi", 2.0, "fp16")], alpha="lo", beta="hi")
    o, _ = run(text, inputs={"x": x})
    assert_fp16_close(o["y"], np.clip(ref(x), -1.5, 2.0))


@pytest.mark.parametrize("mode", ["EXACT", "TANH_APPROXIMATION", "SIGMOID_APPROXIMATION"])
def test_gelu_modes_permissive(mode):
    from math import erf

    x = randn(128, scale=3)
    v = ref(x)
    want = {
        "EXACT": v * 0.5 * (1 + np.vectorize(erf)(v / math.sqrt(2))),
        "TANH_APPROXIMATION": 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))),
        "SIGMOID_APPROXIMATION": v * _sigmoid(1.702 * v),
    }[mode]
    text = unary_prog("gelu", [128], [const("m", mode, "string")], mode="m")
    o, _ = run(text, inputs={"x": x}, strictness="permissive")  # C10: strict rejects gelu
    assert_fp16_close(o["y"], want, ulps=2, atol=2e-4)


# ---- conv ------------------------------------------------------------------------------------------------

def conv_ref(x, w, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1):
    x, w = ref(x), ref(w)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    ho = (h + pad[0] + pad[1] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    wo = (wd + pad[2] + pad[3] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    y = np.zeros((n, o, ho, wo))
    og = o // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, g * cg:(g + 1) * cg, i * dil[0]: i * dil[0] + stride[0] * (ho - 1) + 1: stride[0],
                           j * dil[1]: j * dil[1] + stride[1] * (wo - 1) + 1: stride[1]]
                y[:, g * og:(g + 1) * og] += np.einsum("ncij,oc->noij", patch, w[g * og:(g + 1) * og, :, i, j])
    return y


def conv_program(xshape, wshape, yshape, pad_type="valid", strides=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1,
                 path="@model_path/weights/w.bin", offset=64, dtype="fp16"):
    nsp = len(xshape) - 2
    body = [
        const("pt", pad_type, "string"),
        const("st", list(strides)[-nsp:], "int32", tensor=True),
        const("pd", list(pad)[-2 * nsp:], "int32", tensor=True),
        const("dl", list(dil)[-nsp:], "int32", tensor=True),
        const("gr", groups, "int32"),
        blob_const("w", "fp16", wshape, path, offset),
        stmt("y", "fp16", yshape, "conv", dilations="dl", groups="gr", pad="pd", pad_type="pt", strides="st", weight="w", x="x"),
    ]
    return program({"x": ("fp16", xshape)}, body, ["y"])


def test_conv_1x1_linear_blobfile():
    cin, cout, s = 64, 96, 32
    w = randn(cout, cin, 1, 1, scale=1 / 8)
    x = randn(2, cin, 1, s)
    data, offs = blob_file(w)
    text = conv_program([2, cin, 1, s], [cout, cin, 1, 1], [2, cout, 1, s])
    o, warns = run(text, {"@model_path/weights/w.bin": data}, {"x": x})
    assert_fp16_close(o["y"], conv_ref(x, w), rtol=2e-3, atol=1e-3)
    assert warns == []


def test_conv_1x1_grouped():
    w = randn(8, 2, 1, 1)
    x = randn(1, 8, 3, 5)
    data, _ = blob_file(w)
    text = conv_program([1, 8, 3, 5], [8, 2, 1, 1], [1, 8, 3, 5], groups=4)
    o, _ = run(text, {"@model_path/weights/w.bin": data}, {"x": x})
    assert_fp16_close(o["y"], conv_ref(x, w, groups=4), rtol=2e-3, atol=1e-3)


@pytest.mark.parametrize("case", [
    dict(k=(3, 3), pad_type="valid"),
    dict(k=(3, 3), pad_type="same"),
    dict(k=(3, 3), pad_type="same", strides=(2, 2)),
    dict(k=(3, 5), pad_type="custom", pad=(1, 0, 2, 1)),
    dict(k=(3, 3), pad_type="valid", dil=(2, 1)),
    dict(k=(2, 2), pad_type="valid", strides=(2, 2), groups=2),
    dict(k=(3, 3), pad_type="same", groups=6),  # depthwise
    dict(k=(1, 15), pad_type="same"),  # widest kernel the ANE accepts (C24)
])
def test_conv_general(case):
    kh, kw = case["k"]
    groups = case.get("groups", 1)
    cin, cout = 6, 6 if groups == 6 else 4
    h, wd = 9, 17
    strides, dil = case.get("strides", (1, 1)), case.get("dil", (1, 1))
    pad_type = case["pad_type"]
    if pad_type == "custom":
        pad = case["pad"]
    elif pad_type == "same":
        pad = []
        for i, (n, k, s, d) in enumerate([(h, kh, strides[0], dil[0]), (wd, kw, strides[1], dil[1])]):
            out = -(-n // s)
            total = max((out - 1) * s + d * (k - 1) + 1 - n, 0)
            pad += [total // 2, total - total // 2]
    else:
        pad = (0, 0, 0, 0)
    w = randn(cout, cin // groups, kh, kw, scale=0.3)
    x = randn(2, cin, h, wd)
    want = conv_ref(x, w, strides, pad, dil, groups)
    data, _ = blob_file(w)
    text = conv_program([2, cin, h, wd], list(w.shape), list(want.shape), pad_type, strides,
                        case.get("pad", (0, 0, 0, 0)), dil, groups)
    o, _ = run(text, {"@model_path/weights/w.bin": data}, {"x": x})
    assert_fp16_close(o["y"], want, rtol=2e-3, atol=2e-3)


def test_conv_1d():
    w = randn(5, 3, 3)
    x = randn(1, 3, 20)
    data, _ = blob_file(w)
    text = conv_program([1, 3, 20], [5, 3, 3], [1, 5, 18])
    o, _ = run(text, {"@model_path/weights/w.bin": data}, {"x": x})
    want = conv_ref(x[:, :, None, :], w[:, :, None, :])[:, :, 0, :]
    assert_fp16_close(o["y"], want, rtol=2e-3, atol=1e-3)


def test_conv_weight_from_multi_blob_file_and_fp32_blob():
    # two blobs in one spec-exact file; the second is fp32 and is rounded to fp16 at build (C37)
    w1 = randn(4, 4, 1, 1)
    b = np.float32(rng.standard_normal((1, 4, 1, 1)))
    data, offs = blob_file(w1, b)
    assert offs[0] == 64 and offs[1] > 64
    body = [
        const("pt", "valid", "string"), const("st", [1, 1], tensor=True), const("pd", [0, 0, 0, 0], tensor=True),
        const("dl", [1, 1], tensor=True), const("gr", 1),
        blob_const("w", "fp16", [4, 4, 1, 1], "@model_path/weights/p.bin", offs[0]),
        blob_const("b", "fp32", [1, 4, 1, 1], "@model_path/weights/p.bin", offs[1]),
        stmt("h", "fp16", [1, 4, 1, 16], "conv", dilations="dl", groups="gr", pad="pd", pad_type="pt", strides="st",
             weight="w", x="x"),
        const("to16", "fp16", "string"),
        stmt("bh", "fp16", [1, 4, 1, 1], "cast", x="b", dtype="to16"),
        stmt("y", "fp16", [1, 4, 1, 16], "add", x="h", y="bh"),
    ]
    x = randn(1, 4, 1, 16)
    o, _ = run(program({"x": ("fp16", [1, 4, 1, 16])}, body, ["y"]), {"@model_path/weights/p.bin": data}, {"x": x})
    h = f16(conv_ref(x, w1))
    assert_fp16_close(o["y"], ref(h) + ref(f16(b)), rtol=2e-3, atol=1e-3)


# ---- matmul --------------------------------------------------------------------------------------------

def matmul_program(xs, ys, outs, tx=False, ty=False):
    body = [const("tx", tx, "bool"), const("ty", ty, "bool"),
            stmt("z", "fp16", outs, "matmul", transpose_x="tx", transpose_y="ty", x="x", y="y")]
    return program({"x": ("fp16", xs), "y": ("fp16", ys)}, body, ["z"])


@pytest.mark.parametrize("xs,ys,tx,ty", [
    ([1, 2, 16, 8], [1, 2, 8, 12], False, False),
    ([1, 2, 8, 16], [1, 2, 8, 12], True, False),
    ([1, 2, 16, 8], [1, 2, 12, 8], False, True),
    ([1, 2, 8, 16], [1, 2, 12, 8], True, True),
    ([3, 1, 16, 8], [1, 4, 8, 12], False, False),  # broadcast both leading dims
    ([2, 16, 8], [8, 12], False, False),  # rank 3 x rank 2
    ([16, 8], [8, 12], False, False),
])
def test_matmul(xs, ys, tx, ty):
    x, y = randn(*xs), randn(*ys)
    xr, yr = ref(x), ref(y)
    if tx:
        xr = np.swapaxes(xr, -1, -2)
    if ty:
        yr = np.swapaxes(yr, -1, -2)
    want = np.matmul(xr, yr)
    o, w = run(matmul_program(xs, ys, list(want.shape), tx, ty), inputs={"x": x, "y": y})
    assert_fp16_close(o["z"], want, rtol=2e-3, atol=1e-3)
    assert w == []


def test_matmul_c36_saturation():
    # C36: outputs with |y| >= 32752 become +-inf (M2 Pro, M5), although fp16 could hold them
    x = f16([[300.0, 0.0], [-100.0, 200.0], [50.0, 1.0], [255.875, 0.0], [255.75, 0.0]])
    y = f16([[128.0], [90.0]])  # 38400 -> inf; 5200; 6490; exactly 32752 -> inf; 32736 stays
    o, w = run(matmul_program([5, 2], [2, 1], [5, 1]), inputs={"x": x, "y": y})
    z = o["z"][:, 0]
    assert np.isposinf(z[0]) and z[1] == 5200 and z[2] == 6490 and np.isposinf(z[3]) and z[4] == 32736
    assert any("[C36]" in m for m in w) and len(w) == 1
    o, w = run(matmul_program([5, 2], [2, 1], [5, 1]), inputs={"x": -x, "y": y})
    assert np.isneginf(o["z"][0, 0])


# ---- reductions and softmax ------------------------------------------------------------------------------

REDUCE = {"reduce_sum": np.sum, "reduce_mean": np.mean, "reduce_max": np.max, "reduce_min": np.min, "reduce_prod": np.prod}


@pytest.mark.parametrize("op", sorted(REDUCE))
@pytest.mark.parametrize("axes,keep", [([1], True), ([1], False), ([-1], True), ([1, 3], True), ([0, 2], False),
                                       ([1, 2], False), (None, False), (None, True)])
def test_reduce(op, axes, keep):
    shape = [2, 6, 3, 5]
    x = f16(rng.uniform(0.5, 1.5, shape)) if op == "reduce_prod" else randn(*shape)
    want = REDUCE[op](ref(x), axis=None if axes is None else tuple(axes), keepdims=keep)
    want = np.asarray(want)
    body = [const("kd", keep, "bool")]
    args = dict(x="x", keep_dims="kd")
    if axes is not None:
        body.append(const("ax", axes, "int32", tensor=True))
        args["axes"] = "ax"
    out_shape = list(want.shape) if want.ndim else None
    body.append(stmt("y", "fp16", out_shape, op, **args))
    o, _ = run(program({"x": ("fp16", shape)}, body, ["y"]), inputs={"x": x})
    assert_fp16_close(o["y"], want, rtol=2e-3, atol=1e-3)


def test_reduce_sum_overflow_to_inf():
    # C37 numerical caveat of RMSNorm: the fp16 sum of 768 squares overflows when RMS > ~9.2
    x = f16(np.full([1, 768, 1, 4], 10.0))
    body = [stmt("sq", "fp16", [1, 768, 1, 4], "mul", x="x", y="x"), const("ax", [1], tensor=True), const("kd", True, "bool"),
            stmt("s", "fp16", [1, 1, 1, 4], "reduce_sum", x="sq", axes="ax", keep_dims="kd")]
    o, _ = run(program({"x": ("fp16", [1, 768, 1, 4])}, body, ["s"]), inputs={"x": x})
    assert np.isinf(o["s"]).all()


@pytest.mark.parametrize("axis", [1, -1, 0, 2])
def test_softmax(axis):
    shape = [2, 8, 4, 16]
    x = randn(*shape, scale=4)
    v = ref(x)
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    want = e / e.sum(axis=axis, keepdims=True)
    text = unary_prog("softmax", shape, [const("ax", axis)], axis="ax")
    o, _ = run(text, inputs={"x": x})
    assert_fp16_close(o["y"], want, rtol=2e-3, atol=1e-4)


def test_softmax_with_minus_inf_mask():
    x = f16([[0.0, 1.0, -np.inf, 2.0], [-np.inf] * 4])
    o, _ = run(unary_prog("softmax", [2, 4]), inputs={"x": x})
    v = np.array([0.0, 1.0, 2.0])
    e = np.exp(v - 2) / np.exp(v - 2).sum()
    assert_fp16_close(o["y"][0], [e[0], e[1], 0, e[2]], rtol=2e-3)
    assert np.isnan(o["y"][1]).all()


# ---- shape / layout -------------------------------------------------------------------------------------

def test_reshape_minus_one_and_zero():
    x = randn(1, 4, 1, 8)
    body = [const("s1", [1, 4, -1, 0], tensor=True), stmt("a", "fp16", [1, 4, 1, 8], "reshape", x="x", shape="s1"),
            const("s2", [-1], tensor=True), stmt("b", "fp16", [32], "reshape", x="a", shape="s2"),
            # iOS17+: 0 matches x's dims from the right; a 0 without a counterpart becomes 1
            const("s3", [0, 0, -1, 4], tensor=True), stmt("c", "fp16", [1, 1, 8, 4], "reshape", x="b", shape="s3")]
    o, _ = run(program({"x": ("fp16", X4)}, body, ["a", "b", "c"]), inputs={"x": x})
    np.testing.assert_array_equal(o["a"], x)
    np.testing.assert_array_equal(o["b"], x.ravel())
    np.testing.assert_array_equal(o["c"], x.reshape(1, 1, 8, 4))


def test_reshape_zero_ios16_is_positional():
    text = """program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios16>(tensor<fp16, [2, 3, 4]> x) {
        tensor<int32, [3]> s = const()[name = tensor<string, []>("s"), val = tensor<int32, [3]>([0, 4, -1])];
        tensor<fp16, [2, 4, 3]> y = reshape(shape = s, x = x)[name = tensor<string, []>("y")];
    } -> (y);
}
"""
    x = randn(2, 3, 4)
    o, _ = run(text, inputs={"x": x})
    np.testing.assert_array_equal(o["y"], x.reshape(2, 4, 3))


@pytest.mark.parametrize("perm", [[0, 2, 1, 3], [0, 1, 3, 2], [3, 2, 1, 0], [0, 3, 1, 2]])
def test_transpose(perm):
    x = randn(2, 3, 4, 5)
    shape = [x.shape[p] for p in perm]
    body = [const("p", perm, tensor=True), stmt("y", "fp16", shape, "transpose", x="x", perm="p")]
    o, _ = run(program({"x": ("fp16", [2, 3, 4, 5])}, body, ["y"]), inputs={"x": x})
    np.testing.assert_array_equal(o["y"], np.transpose(x, perm))


@pytest.mark.parametrize("begin,end,stride,bm,em,sq", [
    ([0, 1, 0, 2], [1, 3, 1, 8], None, None, None, None),
    ([0, 0, 0, 7], [1, 4, 1, 0], [1, 1, 1, -2], None, None, None),
    ([0, -3, 0, 1], [1, -1, 1, -1], [1, 1, 1, 3], None, None, None),
    ([0, 2, 0, 0], [0, 0, 0, 5], None, [1, 0, 1, 1], [1, 1, 1, 0], None),
    ([0, 2, 0, 0], [1, 3, 1, 8], None, None, None, [1, 1, 0, 0]),
])
def test_slice_by_index(begin, end, stride, bm, em, sq):
    x = randn(1, 4, 1, 8)
    sl = []
    for i in range(4):
        s = 1 if stride is None else stride[i]
        b = None if bm and bm[i] else begin[i]
        e = None if em and em[i] else end[i]
        sl.append(begin[i] if sq and sq[i] else slice(b, e, s))
    want = x[tuple(sl)]
    body = [const("b", begin, tensor=True), const("e", end, tensor=True)]
    args = dict(x="x", begin="b", end="e")
    for name, v in (("stride", stride), ("begin_mask", bm), ("end_mask", em), ("squeeze_mask", sq)):
        if v is not None:
            body.append(const(name[:2] + "c", v, "int32" if name == "stride" else "bool", tensor=True))
            args[name] = name[:2] + "c"
    body.append(stmt("y", "fp16", list(want.shape), "slice_by_index", **args))
    o, _ = run(program({"x": ("fp16", X4)}, body, ["y"]), inputs={"x": x})
    np.testing.assert_array_equal(o["y"], want)


def test_slice_by_size():
    x = randn(1, 4, 1, 8)
    body = [const("b", [0, 1, 0, 3], tensor=True), const("s", [1, -1, 1, 4], tensor=True),
            stmt("y", "fp16", [1, 3, 1, 4], "slice_by_size", x="x", begin="b", size="s")]
    o, w = run(program({"x": ("fp16", X4)}, body, ["y"]), inputs={"x": x})
    np.testing.assert_array_equal(o["y"], x[:, 1:, :, 3:7])
    assert w == []


@pytest.mark.parametrize("interleave", [False, True])
def test_concat_full_form_permissive(interleave):
    # C01: strict rejects every concat; permissive accepts the full form (named axis + interleave)
    a, b = randn(1, 4, 1, 8), randn(1, 4, 1, 8)
    body = [const("ax", 1), const("il", interleave, "bool"),
            stmt("y", "fp16", [1, 8, 1, 8], "concat", axis="ax", interleave="il", values="(a, b)")]
    o, _ = run(program({"a": ("fp16", X4), "b": ("fp16", X4)}, body, ["y"]), inputs={"a": a, "b": b},
               strictness="permissive")
    if interleave:
        want = np.stack([a, b], axis=2).reshape(1, 8, 1, 8)
    else:
        want = np.concatenate([a, b], axis=1)
    np.testing.assert_array_equal(o["y"], want)


def test_concat_uneven_last_axis():
    a, b, c = randn(1, 2, 3), randn(1, 2, 5), randn(1, 2, 1)
    body = [const("ax", -1), const("il", False, "bool"),
            stmt("y", "fp16", [1, 2, 9], "concat", axis="ax", interleave="il", values="(a, b, c)")]
    o, _ = run(program({"a": ("fp16", [1, 2, 3]), "b": ("fp16", [1, 2, 5]), "c": ("fp16", [1, 2, 1])}, body, ["y"]),
               inputs={"a": a, "b": b, "c": c}, strictness="permissive")
    np.testing.assert_array_equal(o["y"], np.concatenate([a, b, c], axis=-1))


def test_identity_and_split_one_part():
    x = randn(*X4)
    body = [stmt("y", "fp16", X4, "identity", x="x"), const("ax", 1), const("n", 1),
            stmt("z", "fp16", X4, "split", x="y", axis="ax", num_splits="n")]
    o, _ = run(program({"x": ("fp16", X4)}, body, ["y", "z"]), inputs={"x": x})
    np.testing.assert_array_equal(o["y"], x)
    np.testing.assert_array_equal(o["z"], x)


# ---- cast and fp32 I/O ----------------------------------------------------------------------------------

def test_fp32_io_with_casts():
    # fp32 inputs are rounded to fp16 when read; fp32 outputs are the fp16 value widened (C37)
    x = np.float32(rng.standard_normal([1, 16, 1, 8]) * 100)
    x[0, 0, 0, :4] = [1 + 2 ** -12, 70000.0, 1e-9, -3.3e-5]
    body = [const("to16", "fp16", "string"), stmt("xh", "fp16", [1, 16, 1, 8], "cast", x="x", dtype="to16"),
            stmt("sq", "fp16", [1, 16, 1, 8], "mul", x="xh", y="xh"),
            const("to32", "fp32", "string"), stmt("y", "fp32", [1, 16, 1, 8], "cast", x="sq", dtype="to32")]
    o, _ = run(program({"x": ("fp32", [1, 16, 1, 8])}, body, ["y"]), inputs={"x": x})
    assert o["y"].dtype == np.float32
    with np.errstate(over="ignore"):
        xh = x.astype(np.float16)
        want = (xh.astype(np.float64) ** 2).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(o["y"], want)
    assert o["y"][0, 0, 0, 0] == 1.0 and np.isinf(o["y"][0, 0, 0, 1]) and o["y"][0, 0, 0, 2] == 0


def test_fp32_ops_without_cast_compute_in_fp16():
    x = np.float32([1.0, 2 ** -12, 3.0, 65519.0])
    text = program({"x": ("fp32", [4])}, [stmt("y", "fp32", [4], "add", x="x", y="x")], ["y"])
    o, _ = run(text, inputs={"x": x})
    np.testing.assert_array_equal(o["y"], np.float32([2.0, 2 ** -11, 6.0, np.inf]))


def test_cast_to_int32_and_back():
    with np.errstate(over="ignore"):
        x = f16([-2.7, -0.5, 0.0, 1.5, 2.9, 100.4, 70000, -70000])
    body = [const("ti", "int32", "string"), stmt("i", "int32", [8], "cast", x="x", dtype="ti"),
            const("tf", "fp16", "string"), stmt("y", "fp16", [8], "cast", x="i", dtype="tf")]
    o, _ = run(program({"x": ("fp16", [8])}, body, ["y"]), inputs={"x": x})
    want = np.trunc(ref(x))
    np.testing.assert_array_equal(o["y"][:6], f16(want[:6]))
    # 70000 is already inf in fp16; cast saturates it to INT32_MAX/MIN, which is inf again in fp16
    assert np.isposinf(o["y"][6]) and np.isneginf(o["y"][7])


# ---- normalisation --------------------------------------------------------------------------------------

def ln_ref(x, axes, gamma=None, beta=None, eps=1e-5):
    v = ref(x)
    m = v.mean(axis=tuple(axes), keepdims=True)
    var = ((v - m) ** 2).mean(axis=tuple(axes), keepdims=True)
    y = (v - m) / np.sqrt(var + float(np.float16(eps)))
    shape = [x.shape[a] if a in axes else 1 for a in range(x.ndim)]
    if gamma is not None:
        y = y * ref(gamma).reshape(shape)
    if beta is not None:
        y = y + ref(beta).reshape(shape)
    return y


@pytest.mark.parametrize("axes", [[1], [3], [2, 3], [1, 3]])
def test_layer_norm(axes):
    shape = [2, 6, 3, 5]
    x = randn(*shape, scale=3)
    gshape = [shape[a] for a in axes]
    g, b = randn(*gshape), randn(*gshape)
    body = [const("ax", axes, tensor=True), const("eps", 1e-3, "fp16"),
            f'{"tensor<fp16, " + str(gshape) + ">"} g = const()[name = string("g"), val = {tlit(g, "fp16")}];',
            f'{"tensor<fp16, " + str(gshape) + ">"} b = const()[name = string("b"), val = {tlit(b, "fp16")}];',
            stmt("y", "fp16", shape, "layer_norm", x="x", axes="ax", gamma="g", beta="b", epsilon="eps")]
    o, _ = run(program({"x": ("fp16", shape)}, body, ["y"]), inputs={"x": x})
    assert_fp16_close(o["y"], ln_ref(x, axes, g, b, 1e-3), rtol=2e-3, atol=2e-3)


def test_layer_norm_defaults():
    x = randn(2, 16, scale=2)
    o, _ = run(unary_prog("layer_norm", [2, 16]), inputs={"x": x})
    assert_fp16_close(o["y"], ln_ref(x, [0, 1]), rtol=2e-3, atol=2e-3)


def test_rmsnorm_example_5_3():
    # the textbook MIL RMSNorm (no pre-scaling) over channels with a BLOBFILE gamma
    d, s = 768, 64
    g = f16(rng.uniform(0.5, 1.5, [1, d, 1, 1]))
    x = randn(1, d, 1, s)
    data, _ = blob_file(g)
    body = [stmt("sq", "fp16", [1, d, 1, s], "mul", x="x", y="x"), const("ax", [1], tensor=True), const("kd", True, "bool"),
            stmt("ss", "fp16", [1, 1, 1, s], "reduce_sum", x="sq", axes="ax", keep_dims="kd"),
            "fp16 inv_d = const()[name = string(\"inv_d\"), val = fp16(0x1.554p-10)];",
            stmt("ms", "fp16", [1, 1, 1, s], "mul", x="ss", y="inv_d"),
            "fp16 eps = const()[name = string(\"eps\"), val = fp16(0x1.5p-17)];",
            stmt("mse", "fp16", [1, 1, 1, s], "add", x="ms", y="eps"), const("nh", -0.5, "fp16"),
            stmt("r", "fp16", [1, 1, 1, s], "pow", x="mse", y="nh"),
            stmt("xn", "fp16", [1, d, 1, s], "mul", x="x", y="r"),
            blob_const("g", "fp16", [1, d, 1, 1], "@model_path/weights/rms.bin"),
            stmt("y", "fp16", [1, d, 1, s], "mul", x="xn", y="g")]
    o, _ = run(program({"x": ("fp16", [1, d, 1, s])}, body, ["y"]), {"@model_path/weights/rms.bin": data}, {"x": x})
    v = ref(x)
    want = v / np.sqrt((v ** 2).mean(axis=1, keepdims=True) + 1e-5) * ref(g)
    assert_fp16_close(o["y"], want, rtol=6e-3, atol=2e-3)


# ---- indexing / masking ----------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(axis):
    x = randn(5, 6, 7)
    idx = np.array([[0, 3], [-1, 2]], dtype=np.int32)
    ax = axis % 3
    want = np.take(x, idx % x.shape[ax], axis=ax)
    body = [const("ind", idx, "int32"), const("ax", axis),
            stmt("y", "fp16", list(want.shape), "gather", x="x", indices="ind", axis="ax")]
    o, _ = run(program({"x": ("fp16", [5, 6, 7])}, body, ["y"]), inputs={"x": x})
    np.testing.assert_array_equal(o["y"], want)


def test_gather_out_of_range_fails_at_eval():
    from orion.errors import EvalError

    body = [const("ind", [0, 9], "int32", tensor=True), const("ax", 0),
            stmt("y", "fp16", [2, 3], "gather", x="x", indices="ind", axis="ax")]
    with pytest.raises(EvalError):
        run(program({"x": ("fp16", [4, 3])}, body, ["y"]), inputs={"x": randn(4, 3)})


def test_select_with_broadcast():
    a, b = randn(2, 1, 8), randn(1, 3, 8)
    cond = rng.random([3, 1]) > 0.5
    body = [f'tensor<bool, [3, 1]> c = const()[name = string("c"), val = {tlit(cond, "bool")}];',
            stmt("y", "fp16", [2, 3, 8], "select", cond="c", a="a", b="b")]
    o, _ = run(program({"a": ("fp16", [2, 1, 8]), "b": ("fp16", [1, 3, 8])}, body, ["y"]), inputs={"a": a, "b": b})
    np.testing.assert_array_equal(o["y"], np.where(cond, a, b))


def test_select_cond_from_cast():
    x = randn(16)
    body = [const("tb", "bool", "string"), stmt("c", "bool", [16], "cast", x="x", dtype="tb"),
            const("z", 7.0, "fp16"), stmt("y", "fp16", [16], "select", cond="c", a="x", b="z")]
    x[::3] = 0
    o, _ = run(program({"x": ("fp16", [16])}, body, ["y"]), inputs={"x": x})
    np.testing.assert_array_equal(o["y"], np.where(x != 0, x, f16(7)))


@pytest.mark.parametrize("lower,upper", [(-1, 0), (0, -1), (1, 2), (0, 0), (-1, -1)])
def test_band_part(lower, upper):
    x = randn(2, 5, 6)
    i, j = np.meshgrid(np.arange(5), np.arange(6), indexing="ij")
    keep = ((lower < 0) | (i - j <= lower)) & ((upper < 0) | (j - i <= upper))
    body = [const("lo", lower), const("up", upper), stmt("y", "fp16", [2, 5, 6], "band_part", x="x", lower="lo", upper="up")]
    o, _ = run(program({"x": ("fp16", [2, 5, 6])}, body, ["y"]), inputs={"x": x})
    np.testing.assert_array_equal(o["y"], np.where(keep, x, f16(0)))


# ---- attention -------------------------------------------------------------------------------------------

def sdpa_ref(q, k, v):
    q, k, v = ref(q), ref(k), ref(v)
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def sdpa_program(qs, ks, vs, outs, mask_shape=None):
    params = {"q": ("fp16", qs), "k": ("fp16", ks), "v": ("fp16", vs)}
    args = dict(query="q", key="k", value="v")
    body = []
    if mask_shape is not None:
        body.append(f'tensor<fp16, {list(mask_shape)}> m = const()[name = string("m"), '
                    f'val = {tlit(np.triu(np.full(mask_shape, -1e4), 1), "fp16")}];')
        args["attn_mask"] = "m"
    body.append(stmt("o", "fp16", outs, "scaled_dot_product_attention", **args))
    return program(params, body, ["o"])


def test_sdpa():
    q, k, v = randn(1, 2, 16, 8), randn(1, 2, 32, 8), randn(1, 2, 32, 12)
    o, w = run(sdpa_program([1, 2, 16, 8], [1, 2, 32, 8], [1, 2, 32, 12], [1, 2, 16, 12]),
               inputs={"q": q, "k": k, "v": v})
    assert_fp16_close(o["o"], sdpa_ref(q, k, v), rtol=8e-3, atol=4e-3)
    assert w == []


def test_sdpa_mask_ignored_permissive():
    # C06: the ANE ignores attn_mask; permissive reproduces that (and warns on every execute)
    q, k, v = randn(1, 16, 8), randn(1, 16, 8), randn(1, 16, 8)
    o, w = run(sdpa_program([1, 16, 8], [1, 16, 8], [1, 16, 8], [1, 16, 8], mask_shape=[16, 16]),
               inputs={"q": q, "k": k, "v": v}, strictness="permissive")
    assert_fp16_close(o["o"], sdpa_ref(q, k, v), rtol=8e-3, atol=4e-3)
    assert sum("[C06]" in m for m in w) == 2  # one at build, one per execute


# ---- quantisation ----------------------------------------------------------------------------------------

def test_quantize_dequantize_per_tensor():
    x = randn(4, 32, scale=2)
    body = [const("s", 0.03125, "fp16"), const("zp", 3, "int8"), const("od", "int8", "string"),
            stmt("q", "int8", [4, 32], "quantize", input="x", scale="s", zero_point="zp", output_dtype="od"),
            stmt("y", "fp16", [4, 32], "dequantize", input="q", scale="s", zero_point="zp")]
    o, _ = run(program({"x": ("fp16", [4, 32])}, body, ["y"]), inputs={"x": x})
    q = np.clip(np.round(ref(x) / 0.03125) + 3, -128, 127)      # coremltools: round, then + zero_point
    assert_fp16_close(o["y"], (q - 3) * 0.03125)


def test_quantize_per_channel_uint8():
    x = randn(3, 16, scale=2)
    scales = [0.05, 0.1, 0.02]
    body = [f'tensor<fp16, [3]> s = const()[name = string("s"), val = {tlit(scales, "fp16")}];',
            f'tensor<uint8, [3]> zp = const()[name = string("zp"), val = {tlit([128, 100, 0], "uint8")}];',
            const("od", "uint8", "string"), const("ax", 0),
            stmt("q", "uint8", [3, 16], "quantize", input="x", scale="s", zero_point="zp", output_dtype="od", axis="ax"),
            stmt("y", "fp16", [3, 16], "dequantize", input="q", scale="s", zero_point="zp", axis="ax")]
    o, _ = run(program({"x": ("fp16", [3, 16])}, body, ["y"]), inputs={"x": x})
    s = ref(f16(scales))[:, None]
    zp = np.array([128, 100, 0])[:, None]
    q = np.clip(np.round(ref(x) / s) + zp, 0, 255)
    assert_fp16_close(o["y"], (q - zp) * s)


def test_constexpr_affine_dequantize_int8_blob():
    wq = rng.integers(-128, 128, [8, 16, 1, 1]).astype(np.int8)
    data, _ = blob_file(wq)
    scale = [float(f16(v)) for v in rng.uniform(0.01, 0.05, 8)]
    body = [
        "tensor<fp16, [8, 16, 1, 1]> w = constexpr_affine_dequantize()[axis = int32(0), name = string(\"w\"), "
        "quantized_data = tensor<int8, [8, 16, 1, 1]>(BLOBFILE(path = string(\"@model_path/weights/q.bin\"), "
        f"offset = uint64(64))), scale = {tlit(scale, 'fp16')}, zero_point = int8(1)];",
        const("pt", "valid", "string"), const("st", [1, 1], tensor=True), const("pd", [0, 0, 0, 0], tensor=True),
        const("dl", [1, 1], tensor=True), const("gr", 1),
        stmt("y", "fp16", [1, 8, 1, 4], "conv", dilations="dl", groups="gr", pad="pd", pad_type="pt", strides="st",
             weight="w", x="x"),
    ]
    x = randn(1, 16, 1, 4)
    o, _ = run(program({"x": ("fp16", [1, 16, 1, 4])}, body, ["y"]), {"@model_path/weights/q.bin": data}, {"x": x})
    w = f16((wq.astype(np.float64) - 1) * np.array(scale)[:, None, None, None])
    assert_fp16_close(o["y"], conv_ref(x, w), rtol=2e-3, atol=2e-3)


# ---- program structure -----------------------------------------------------------------------------------

def test_multiple_outputs_and_unused_values():
    x = randn(*X4)
    body = [stmt("a", "fp16", X4, "relu", x="x"), stmt("dead", "fp16", X4, "exp", x="x"),
            stmt("b", "fp16", X4, "add", x="a", y="x"), stmt("c", "fp16", X4, "mul", x="b", y="a")]
    o, _ = run(program({"x": ("fp16", X4)}, body, ["c", "a"]), inputs={"x": x})
    a = np.maximum(x, 0)
    np.testing.assert_array_equal(o["a"], a)
    assert_fp16_close(o["c"], ref(f16(ref(a) + ref(x))) * ref(a))


def test_deep_chain_reuses_memory():
    # 64 chained ops: the arena must reuse freed intermediates yet keep every live one intact
    x = randn(1, 32, 1, 64)
    body, prev = [const("h", 0.5, "fp16")], "x"
    for i in range(64):
        body.append(stmt(f"t{i}", "fp16", [1, 32, 1, 64], "add" if i % 2 else "mul", x=prev, y="x" if i % 2 else "h"))
        prev = f"t{i}"
    body.append(stmt("y", "fp16", [1, 32, 1, 64], "tanh", x=prev))
    o, _ = run(program({"x": ("fp16", [1, 32, 1, 64])}, body, ["y"]), inputs={"x": x})
    v = x.copy()
    for i in range(64):
        v = f16(ref(v) + ref(x)) if i % 2 else f16(ref(v) * 0.5)
    assert_fp16_close(o["y"], np.tanh(ref(v)), ulps=1)


def test_legacy_dialect_program():
    text = """program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios16>(tensor<fp16, [1, 4, 1, 8]> a, tensor<fp16, [1, 4, 1, 8]> b) {
        tensor<fp16, []> h = const()[name = tensor<string, []>("h"), val = tensor<fp16, []>(0.5)];
        tensor<fp16, [1, 4, 1, 8]> s = add(x = a, y = b)[name = tensor<string, []>("s")];
        tensor<fp16, [1, 4, 1, 8]> z = mul(x = s, y = h)[name = tensor<string, []>("z")];
    } -> (z);
}
"""
    a, b = randn(*X4), randn(*X4)
    for chip in ("m1", "m4"):
        o, _ = run(text, inputs={"a": a, "b": b}, chip=chip)
        assert_fp16_close(o["z"], ref(f16(ref(a) + ref(b))) * 0.5)


def test_concurrent_execute_of_one_plan():
    # Plan::execute is thread-safe: per-call scratch arena, no shared mutable state; 8 threads at once
    # must reproduce the single-threaded result byte for byte (checked inside the hook)
    d, s = 64, 128
    w = randn(d, d, 3, 3, scale=0.05)
    data, _ = blob_file(w)
    body = [const("pt", "same", "string"), const("st", [1, 1], tensor=True), const("pd", [0, 0, 0, 0], tensor=True),
            const("dl", [1, 1], tensor=True), const("gr", 1), blob_const("w", "fp16", [d, d, 3, 3], "@model_path/weights/w.bin"),
            stmt("y", "fp16", [1, d, 2, s], "conv", dilations="dl", groups="gr", pad="pd", pad_type="pt", strides="st",
                 weight="w", x="x"),
            const("ax", [1, 3], tensor=True), const("kd", True, "bool"),
            stmt("r", "fp16", [1, 1, 2, 1], "reduce_mean", x="y", axes="ax", keep_dims="kd"),
            stmt("t", "fp16", [1, d, 2, s], "sub", x="y", y="r"),
            const("sh", [2 * d, s], tensor=True), stmt("t2", "fp16", [2 * d, s], "reshape", x="t", shape="sh"),
            const("f", False, "bool"), const("tr", True, "bool"),
            stmt("m", "fp16", [2 * d, 2 * d], "matmul", x="t2", y="t2", transpose_x="f", transpose_y="tr"),
            const("sa", -1), stmt("p", "fp16", [2 * d, 2 * d], "softmax", x="m", axis="sa")]
    x = randn(1, d, 2, s)
    o, _ = run(program({"x": ("fp16", [1, d, 2, s])}, body, ["p", "t"]), {"@model_path/weights/w.bin": data}, {"x": x},
               concurrent=8)
    assert set(o) == {"p", "t"} and np.isfinite(o["p"]).all()
