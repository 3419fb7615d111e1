"""ANE constraints reproduced by the simulator's plan builder (orion.sim.constraints()): every
compile-reject with a program that triggers it (constraint ID and statement asserted), every
reproduce/warn behaviour with data, the MIL-level checks (names, parameters, types), the constraint
and op catalogs, and the cost model."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from orion import _native
from orion.errors import CompileError
from simutil import blob_const, blob_file, const, f16, program, run, stmt

X4 = [1, 4, 1, 8]
rng = np.random.default_rng(7)


def reject(text, cid, statement, weights=None, chip="m4", strictness="strict", match=None):
    with pytest.raises(CompileError) as ei:
        _native.testing.sim_plan_info(text, weights or {}, chip, strictness)
    e = ei.value
    assert e.constraint == cid, str(e)
    assert e.statement == statement, str(e)
    if cid:
        assert str(e).endswith(f"[{cid}]"), str(e)
        assert str(e).startswith(("InvalidMILProgram: ", "ANECCompile() FAILED: err=(CompilationFailure) ")), str(e)
    if match:
        assert match in str(e), str(e)
    return e


def build(text, weights=None, chip="m4", strictness="strict"):
    return _native.testing.sim_plan_info(text, weights or {}, chip, strictness)


def ids(warnings):
    return [w[w.rindex("[") + 1:-1] for w in warnings if w.endswith("]")]


def simple(body, returns=("y",), params=None):
    return program(params or {"x": ("fp16", X4)}, list(body), list(returns))


def conv_body(wshape, xname="x", out="y", oshape=None, path="@model_path/weights/w.bin", bias=None):
    args = dict(dilations="dl", groups="gr", pad="pd", pad_type="pt", strides="st", weight="w", x=xname)
    if bias:
        args["bias"] = bias
    return [const("pt", "valid", "string"), const("st", [1, 1], tensor=True), const("pd", [0, 0, 0, 0], tensor=True),
            const("dl", [1, 1], tensor=True), const("gr", 1), blob_const("w", "fp16", wshape, path),
            stmt(out, "fp16", oshape, "conv", **args)]


# ---- C01 concat ------------------------------------------------------------------------------------

CONCAT_PARAMS = {"a": ("fp16", X4), "b": ("fp16", X4)}


def test_c01_strict_rejects_every_concat():
    body = [const("ax", 1), const("il", False, "bool"),
            stmt("y", "fp16", [1, 8, 1, 8], "concat", axis="ax", interleave="il", values="(a, b)")]
    reject(program(CONCAT_PARAMS, body, ["y"]), "C01", "y")


@pytest.mark.parametrize("args", [dict(axis="int32(1)"), dict(axis="ax"), dict(axis="int32(1)", interleave="il"),
                                  dict(axis="ax", interleave="bool(false)")])
def test_c01_permissive_rejects_short_form(args):
    body = [const("ax", 1), const("il", False, "bool"), stmt("y", "fp16", [1, 8, 1, 8], "concat", values="(a, b)", **args)]
    reject(program(CONCAT_PARAMS, body, ["y"]), "C01", "y", strictness="permissive",
           match="concat requires named axis and interleave")


def test_c01_permissive_accepts_full_form():
    body = [const("ax", 1), const("il", False, "bool"),
            stmt("y", "fp16", [1, 8, 1, 8], "concat", axis="ax", interleave="il", values="(a, b)")]
    assert build(program(CONCAT_PARAMS, body, ["y"]), strictness="permissive")["num_ops"] == 1


# ---- C06 SDPA mask --------------------------------------------------------------------------------------

def test_c06_masked_sdpa_strict_rejects_permissive_ignores():
    m = np.triu(np.full([8, 8], -1e4), 1)
    body = [f'tensor<fp16, [8, 8]> m = const()[name = string("m"), val = tensor<fp16, [8, 8]>'
            f'([{", ".join(repr(float(v)) for v in m.ravel())}])];',
            stmt("o", "fp16", [1, 8, 16], "scaled_dot_product_attention", query="q", key="k", value="v", attn_mask="m")]
    text = program({"q": ("fp16", [1, 8, 16]), "k": ("fp16", [1, 8, 16]), "v": ("fp16", [1, 8, 16])}, body, ["o"])
    reject(text, "C06", "o")
    q, k, v = (f16(rng.standard_normal([1, 8, 16])) for _ in range(3))
    o1, w = run(text, inputs={"q": q, "k": k, "v": v}, strictness="permissive")
    unmasked = text.replace("attn_mask = m, ", "")
    assert "attn_mask" not in unmasked
    o2, w2 = run(unmasked, inputs={"q": q, "k": k, "v": v}, strictness="permissive")
    np.testing.assert_array_equal(o1["o"], o2["o"])  # the mask has no effect at all
    assert ids(w).count("C06") == 2 and w2 == []


# ---- C08 BLOBFILE offset ---------------------------------------------------------------------------------

def offset_program(offset):
    return simple([blob_const("w", "fp16", [1, 4, 1, 8], "@model_path/weights/w.bin", offset),
                   stmt("y", "fp16", X4, "add", x="x", y="w")])


@pytest.mark.parametrize("offset", [0, 128, 96])
def test_c08_strict_rejects_offset_not_at_metadata(offset):
    data, _ = blob_file(f16(np.arange(64)), f16(np.arange(32)))
    reject(offset_program(offset), "C08", "w", {"@model_path/weights/w.bin": data},
           match="must point at the metadata record, 64 for the first blob")


def test_c08_permissive_reads_offset_plus_64_and_warns():
    w0 = f16(np.arange(64) + 1)
    data, _ = blob_file(w0)
    x = f16(np.zeros(X4))
    o, w = run(offset_program(128), {"@model_path/weights/w.bin": data}, {"x": x}, strictness="permissive")
    garbage = np.frombuffer(data[192:192 + 64], dtype=np.float16).reshape(X4)  # payload taken at 128 + 64
    np.testing.assert_array_equal(o["y"], garbage)
    np.testing.assert_array_equal(garbage.ravel(), w0[32:64])
    assert "C08" in ids(w)
    data, _ = blob_file(w0[:32])
    o, w = run(offset_program(64), {"@model_path/weights/w.bin": data}, {"x": x}, strictness="permissive")
    np.testing.assert_array_equal(o["y"].ravel(), w0[:32])
    assert w == []


# ---- C10 gelu ----------------------------------------------------------------------------------------

def test_c10_gelu():
    reject(simple([stmt("y", "fp16", X4, "gelu", x="x")]), "C10", "y", match="gelu not supported")
    with_mode = simple([const("m", "TANH_APPROXIMATION", "string"), stmt("y", "fp16", X4, "gelu", x="x", mode="m")])
    reject(with_mode, "C10", "y")
    reject(simple([stmt("y", "fp16", X4, "gelu", x="x")]), "C10", "y", strictness="permissive")
    assert build(with_mode, strictness="permissive")["num_ops"] == 1


# ---- C11 weight dictionary entries ----------------------------------------------------------------------

def test_c11_empty_weight_entry():
    reject(simple([stmt("y", "fp16", X4, "relu", x="x")]), "C11", None, {"@model_path/weights/w.bin": b""})


# ---- C15 / C16 / C17 / C20 -------------------------------------------------------------------------------

def test_c15_inline_matmul_flags():
    body = [const("f", False, "bool"), stmt("z", "fp16", [8, 8], "matmul", x="a", y="b", transpose_x="bool(false)", transpose_y="f")]
    reject(program({"a": ("fp16", [8, 8]), "b": ("fp16", [8, 8])}, body, ["z"]), "C15", "z",
           match="transpose flags must be named consts")
    ok = [const("f", False, "bool"), stmt("z", "fp16", [8, 8], "matmul", x="a", y="b", transpose_x="f", transpose_y="f")]
    assert build(program({"a": ("fp16", [8, 8]), "b": ("fp16", [8, 8])}, ok, ["z"]))["num_ops"] == 1


def test_c16_conv_bias():
    body = conv_body([4, 4, 1, 1], oshape=X4, bias="bb")
    body.insert(0, 'tensor<fp16, [4]> bb = const()[name = string("bb"), val = tensor<fp16, [4]>([1.0, 2.0, 3.0, 4.0])];')
    data, _ = blob_file(f16(np.ones([4, 4, 1, 1])))
    reject(simple(body), "C16", "y", {"@model_path/weights/w.bin": data}, match="conv bias not supported")


def test_c17_undefined_return():
    reject(simple([stmt("y", "fp16", X4, "relu", x="x")], returns=("y", "gone")), "C17", "gone",
           match="undefined return value gone")


def test_c17_returning_a_parameter_warns():
    info = build(simple([stmt("y", "fp16", X4, "relu", x="x")], returns=("y", "x")))
    assert "C17" in ids(info["warnings"])


def test_c20_rsqrt():
    reject(simple([stmt("y", "fp16", X4, "rsqrt", x="x")]), "C20", "y", match="rsqrt not supported")
    reject(simple([stmt("y", "fp16", X4, "rsqrt", x="x")]), "C20", "y", strictness="permissive")


# ---- C18 / C19 weight budget -----------------------------------------------------------------------------

def weights_program(n_tensors, files, penalty=None):
    """n_tensors [1,4,1,1] BLOBFILE consts spread over `files` files, each added to the running sum."""
    body, weights, prev = [], {}, "x"
    per_file = -(-n_tensors // files)
    for f in range(files):
        k = min(per_file, n_tensors - f * per_file)
        data, offs = blob_file(*[f16(np.full([1, 4, 1, 1], f * per_file + j)) for j in range(k)])
        weights[f"@model_path/weights/w{f:02d}.bin"] = data
        for j in range(k):
            i = f * per_file + j
            body.append(blob_const(f"w{i:02d}", "fp16", [1, 4, 1, 1], f"@model_path/weights/w{f:02d}.bin", offs[j]))
            body.append(stmt(f"s{i:02d}", "fp16", X4, "add", x=prev, y=f"w{i:02d}"))
            prev = f"s{i:02d}"
    if penalty == "pow":
        body += [const("two", 2.0, "fp16"), stmt("p", "fp16", X4, "pow", x=prev, y="two")]
        prev = "p"
    elif penalty == "add_tensor":  # add against a [1, 4, 1, 1] inline const: no penalty
        body += [const("c4", np.ones([1, 4, 1, 1]), "fp16"), stmt("p", "fp16", X4, "add", x=prev, y="c4")]
        prev = "p"
    elif penalty == "add_scalar":
        body += [const("one", 1.0, "fp16"), stmt("p", "fp16", X4, "add", x=prev, y="one")]
        prev = "p"
    body.append(stmt("y", "fp16", X4, "identity", x=prev))
    return simple(body), weights


def test_c18_seventeen_weight_files():
    text, w = weights_program(17, 17)
    reject(text, "C18", "w16", w, match="too many weight tensors (17 > 16)")
    reject(text, "C18", "w16", w, strictness="permissive")
    text, w = weights_program(16, 16)
    assert build(text, w)["num_ops"] == 17


@pytest.mark.parametrize("penalty", ["pow", "add_scalar"])
def test_c19_pow_or_scalar_add_lowers_limit_to_15(penalty):
    text, w = weights_program(16, 16, penalty)
    reject(text, "C19", "w15", w, match="(16 > 15)")
    text, w = weights_program(15, 15, penalty)
    build(text, w)


def test_c18_strict_counts_tensors_permissive_counts_files():
    text, w = weights_program(17, 1)  # 17 tensors in one spec-exact file
    reject(text, "C18", "w16", w)
    assert build(text, w, strictness="permissive")["num_ops"] == 18


def test_c19_add_against_tensor_const_is_free():
    text, w = weights_program(16, 16, "add_tensor")
    build(text, w)


# ---- C21 softmax length ---------------------------------------------------------------------------------

def softmax_program(shape, axis):
    return program({"x": ("fp16", shape)}, [const("ax", axis), stmt("y", "fp16", shape, "softmax", x="x", axis="ax")], ["y"])


def test_c21_softmax_last_axis_non_power_of_two():
    reject(softmax_program([1, 4, 1, 100], -1), "C21", "y")
    reject(softmax_program([1, 4, 1, 100], 3), "C21", "y")
    build(softmax_program([1, 4, 1, 100], -1), strictness="permissive")
    build(softmax_program([1, 4, 1, 128], -1))
    build(softmax_program([1, 1000, 1, 16], 1))  # the 32,000-way vocab softmax runs on axis 1


# ---- C22 / C23 shapes -----------------------------------------------------------------------------------

def test_c22_dimension_limit():
    reject(program({"x": ("fp16", [1, 65537])}, [stmt("y", "fp16", [1, 65537], "relu", x="x")], ["y"]), "C22", "x",
           match="exceeds 65536")
    body = [const("s", [1, 1, 1, 65540], tensor=True)]
    reject(program({"x": ("fp16", [1, 5, 1, 13108])},
                   body + [stmt("y", "fp16", [1, 1, 1, 65540], "reshape", x="x", shape="s")], ["y"]), "C22", "y")
    build(program({"x": ("fp16", [1, 65536])}, [stmt("y", "fp16", [1, 65536], "relu", x="x")], ["y"]))


def test_c23_rank_limit():
    s6 = [1, 2, 1, 2, 1, 2]
    reject(program({"x": ("fp16", s6)}, [stmt("y", "fp16", s6, "relu", x="x")], ["y"]), "C23", "x")
    body = [const("s", s6, tensor=True), stmt("y", "fp16", s6, "reshape", x="x", shape="s")]
    reject(program({"x": ("fp16", [1, 8])}, body, ["y"]), "C23", "y")


# ---- C24 / C25 conv limits -------------------------------------------------------------------------------

@pytest.mark.parametrize("chip,kw,ok", [("m4", 15, True), ("m4", 16, False), ("m1", 13, True), ("m1", 14, False)])
def test_c24_conv_kernel_width(chip, kw, ok):
    data, _ = blob_file(f16(np.ones([2, 4, 1, kw])))
    text = simple(conv_body([2, 4, 1, kw], oshape=[1, 2, 1, 32 - kw + 1]), params={"x": ("fp16", [1, 4, 1, 32])})
    w = {"@model_path/weights/w.bin": data}
    if ok:
        build(text, w, chip=chip, strictness="permissive")
    else:
        reject(text, "C24", "y", w, chip=chip, strictness="permissive")


def test_c25_conv_input_channels():
    for cin, ok in ((32000, False), (9000, True)):
        data, _ = blob_file(f16(np.ones([2, cin, 1, 1])))
        text = simple(conv_body([2, cin, 1, 1], oshape=[1, 2, 1, 16]), params={"x": ("fp16", [1, cin, 1, 16])})
        w = {"@model_path/weights/w.bin": data}
        if ok:
            assert "C25" in ids(build(text, w)["warnings"])
        else:
            reject(text, "C25", "y", w)
    data, _ = blob_file(f16(np.ones([32000, 2, 1, 1])))  # 32,000 *output* channels compile
    text = simple(conv_body([32000, 2, 1, 1], oshape=[1, 32000, 1, 1]), params={"x": ("fp16", [1, 2, 1, 1])})
    assert "C25" not in ids(build(text, {"@model_path/weights/w.bin": data})["warnings"])


# ---- C26 working set ------------------------------------------------------------------------------------

def test_c26_working_set_warning_and_cost():
    big = [1, 2048, 1, 4096]  # 16 MB per fp16 tensor
    info = build(program({"a": ("fp16", big), "b": ("fp16", big)}, [stmt("y", "fp16", big, "add", x="a", y="b")], ["y"]))
    assert "C26" in ids(info["warnings"])
    small = build(program({"a": ("fp16", X4), "b": ("fp16", X4)}, [stmt("y", "fp16", X4, "add", x="a", y="b")], ["y"]))
    assert "C26" not in ids(small["warnings"])
    assert small["est_ms"] == pytest.approx(0.095, abs=1e-3)  # dispatch floor (C41)


# ---- C27 reduce_mean --------------------------------------------------------------------------------------

def test_c27_reduce_mean_accepted():
    body = [const("ax", [1], tensor=True), const("kd", True, "bool"),
            stmt("y", "fp16", [1, 1, 1, 8], "reduce_mean", x="x", axes="ax", keep_dims="kd")]
    for s in ("strict", "permissive"):
        assert build(simple(body), strictness=s)["num_ops"] == 1


# ---- C28 / C29 / C30 legacy chips -------------------------------------------------------------------------

LEGACY = """program(1.0)
[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3505.4.1"}})]
{
    func main<ios16>(tensor<fp16, [8, 8]> a, tensor<fp16, [8, 8]> b) {
        tensor<bool, []> f = const()[name = tensor<string, []>("f"), val = tensor<bool, []>(false)];
        tensor<fp16, [8, 8]> z = matmul(transpose_x = f, transpose_y = f, x = a, y = b)[name = tensor<string, []>("z")];
    } -> (z);
}
"""


def test_c28_fp32_io_and_cast_on_m1_m2():
    fp32_in = program({"x": ("fp32", X4)}, [const("t", "fp16", "string"), stmt("y", "fp16", X4, "cast", x="x", dtype="t")], ["y"])
    for chip in ("m1", "m2"):
        reject(fp32_in, "C28", "x", chip=chip, strictness="permissive")
    build(fp32_in, chip="m3")
    fp32_out = simple([const("t", "fp32", "string"), stmt("y", "fp32", X4, "cast", x="x", dtype="t")])
    reject(fp32_out, "C28", "y", chip="m2", strictness="permissive")
    internal = simple([const("t", "fp32", "string"), stmt("h", "fp32", X4, "cast", x="x", dtype="t"),
                       const("t2", "fp16", "string"), stmt("y", "fp16", X4, "cast", x="h", dtype="t2")])
    reject(internal, "C28", "h", chip="m1", strictness="permissive", match="cast between fp32 and fp16")
    build(internal, chip="m5")


def test_c29_short_dialect_on_m1_m2_strict():
    text = simple([stmt("y", "fp16", X4, "relu", x="x")])
    for chip in ("m1", "m2"):
        reject(text, "C29", None, chip=chip)
        build(text, chip=chip, strictness="permissive")
    build(text, chip="m3")


def test_c30_matmul_on_m1_m2_strict():
    reject(LEGACY, "C30", "z", chip="m2")
    reject(LEGACY, "C30", "z", chip="m1")
    build(LEGACY, chip="m2", strictness="permissive")
    build(LEGACY, chip="m4")
    sdpa = LEGACY.replace("matmul(transpose_x = f, transpose_y = f, x = a, y = b)",
                          "scaled_dot_product_attention(key = a, query = a, value = b)")
    reject(sdpa, "C30", "z", chip="m1")


# ---- C32 sloppy multi-blob files ---------------------------------------------------------------------------

def sloppy_file():
    """maderix-style multi-blob file: count left at 1, second record's offset field 0."""
    data, offs = blob_file(f16(np.arange(32)), f16(np.arange(32) * 2))
    b = bytearray(data)
    b[0:4] = struct.pack("<I", 1)
    b[offs[1] + 16: offs[1] + 24] = struct.pack("<Q", 0)
    return bytes(b), offs


def test_c32_m1_rejects_non_spec_multi_blob_file_m4_warns():
    data, offs = sloppy_file()
    text = simple([blob_const("w", "fp16", X4, "@model_path/weights/w.bin", offs[1]), stmt("y", "fp16", X4, "add", x="x", y="w")])
    w = {"@model_path/weights/w.bin": data}
    reject(text, "C32", "w", w, chip="m1", strictness="permissive")
    reject(text, "C32", "w", w, chip="m2", strictness="permissive")
    o, warns = run(text, w, {"x": f16(np.zeros(X4))})
    np.testing.assert_array_equal(o["y"].ravel(), np.arange(32) * 2)
    assert "C32" in ids(warns)
    spec, offs = blob_file(f16(np.arange(32)), f16(np.arange(32) * 2))  # spec-exact multi-blob: fine on M1
    build(text, {"@model_path/weights/w.bin": spec}, chip="m1", strictness="permissive")


# ---- C33 reduce x 0 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("k,ok", [(0.0, False), (1e-10, False), (-0.0, False), (0.5, True)])
def test_c33_mul_reduction_by_zero(k, ok):
    body = [const("ax", [1], tensor=True), const("kd", True, "bool"),
            stmt("r", "fp16", [1, 1, 1, 8], "reduce_sum", x="x", axes="ax", keep_dims="kd"),
            const("z", k, "fp16"), stmt("y", "fp16", [1, 1, 1, 8], "mul", x="z", y="r")]
    if ok:
        build(simple(body))
    else:
        reject(simple(body), "C33", "y")


def test_c33_mul_by_zero_without_reduction_compiles():
    build(simple([const("z", 0.0, "fp16"), stmt("y", "fp16", X4, "mul", x="x", y="z")]))


# ---- C34 slice_by_index of inputs + RMSNorm + conv ----------------------------------------------------------

def test_c34_warns_in_strict_only():
    data, _ = blob_file(f16(np.ones([4, 4, 1, 1])))
    body = [const("b", [0, 0, 0, 0], tensor=True), const("e", [1, 4, 1, 8], tensor=True),
            stmt("xs", "fp16", X4, "slice_by_index", x="x", begin="b", end="e"),
            stmt("sq", "fp16", X4, "mul", x="xs", y="xs"), const("ax", [1], tensor=True), const("kd", True, "bool"),
            stmt("ss", "fp16", [1, 1, 1, 8], "reduce_sum", x="sq", axes="ax", keep_dims="kd"),
            const("nh", -0.5, "fp16"), stmt("r", "fp16", [1, 1, 1, 8], "pow", x="ss", y="nh"),
            stmt("xn", "fp16", X4, "mul", x="xs", y="r")] + conv_body([4, 4, 1, 1], xname="xn", oshape=X4)
    w = {"@model_path/weights/w.bin": data}
    assert ids(build(simple(body), w)["warnings"]) == ["C34"]
    assert build(simple(body), w, strictness="permissive")["warnings"] == []


# ---- C35 slice saturation on pre-A16 chips ------------------------------------------------------------------

def test_c35_width_slice_clamps_on_m1_m2():
    x = f16(np.linspace(-6000, 6000, 32).reshape(1, 4, 1, 8))
    body = [const("b", [0, 0, 0, 2], tensor=True), const("s", [1, 4, 1, 4], tensor=True),
            stmt("y", "fp16", [1, 4, 1, 4], "slice_by_size", x="x", begin="b", size="s")]
    want = x[:, :, :, 2:6]
    for chip in ("m1", "m2"):
        o, w = run(simple(body), inputs={"x": x}, chip=chip, strictness="permissive")
        np.testing.assert_array_equal(o["y"], np.clip(want, -4094, 4094))
        assert ids(w) == ["C35"]
    o, w = run(simple(body), inputs={"x": x}, chip="m4")
    np.testing.assert_array_equal(o["y"], want)
    assert w == []
    body0 = [const("b", [0, 1, 0, 0], tensor=True), const("s", [1, 2, 1, 8], tensor=True),
             stmt("y", "fp16", [1, 2, 1, 8], "slice_by_size", x="x", begin="b", size="s")]
    o, w = run(simple(body0), inputs={"x": x}, chip="m1", strictness="permissive")  # begin 0 on the width axis
    np.testing.assert_array_equal(o["y"], x[:, 1:3])
    assert w == []


# ---- C38 / C39 / C40 --------------------------------------------------------------------------------------

def test_c38_layer_norm_epsilon_dtype():
    g = 'tensor<fp16, [4]> g = const()[name = string("g"), val = tensor<fp16, [4]>([1.0, 1.0, 1.0, 1.0])];'
    body = [const("ax", [1], tensor=True), g, const("eps", 1e-5, "fp32"),
            stmt("y", "fp16", X4, "layer_norm", x="x", axes="ax", gamma="g", epsilon="eps")]
    reject(simple(body), "C38", "y", match="epsilon dtype (fp32) must equal gamma dtype (fp16)")
    body[2] = const("eps", 1e-5, "fp16")
    build(simple(body))


def test_c39_io_dtypes():
    reject(program({"c": ("bool", [4])}, [stmt("y", "bool", [4], "identity", x="c")], ["y"]), "C39", "c")
    reject(program({"i": ("int32", [4])}, [stmt("y", "int32", [4], "identity", x="i")], ["y"]), "C39", "i")
    body = [const("t", "bool", "string"), stmt("y", "bool", X4, "cast", x="x", dtype="t")]
    reject(simple(body), "C39", "y", match="bool tensors cannot be program outputs")


def test_c40_duplicate_names():
    reject(simple([stmt("y", "fp16", X4, "relu", x="x"), stmt("y", "fp16", X4, "exp", x="x")]), "C40", "y",
           match="duplicate name 'y'")
    reject(simple([stmt("x", "fp16", X4, "relu", x="x"), stmt("y", "fp16", X4, "exp", x="x")]), "C40", "x")
    reject(simple([const("c", 1.0, "fp16"), const("c", 2.0, "fp16"), stmt("y", "fp16", X4, "mul", x="x", y="c")]), "C40", "c")


# ---- MIL-level resolution errors (no constraint ID) ----------------------------------------------------------

def test_undefined_reference():
    reject(simple([stmt("y", "fp16", X4, "add", x="x", y="nope")]), None, "y", match="'nope' is not defined before use")
    reject(simple([stmt("y", "fp16", X4, "add", x="x", y="later"), stmt("later", "fp16", X4, "relu", x="x")]), None, "y")


def test_unknown_op_and_parameters():
    reject(simple([stmt("y", "fp16", X4, "frobnicate", x="x")]), None, "y", match="unknown op 'frobnicate'")
    e = reject(simple([stmt("y", "fp16", X4, "relu", x="x", alpha="x")]), None, "y", match="unknown parameter 'alpha'")
    assert "relu" in str(e)
    reject(simple([stmt("y", "fp16", X4, "add", x="x")]), None, "y", match="missing required parameter 'y'")
    reject(simple(['tensor<fp16, [1, 4, 1, 8]> y = relu(x = x);']), None, "y", match="name attribute")


def test_declared_type_must_match():
    reject(simple([stmt("y", "fp16", [1, 4, 1, 9], "relu", x="x")]), None, "y",
           match="declared type tensor<fp16, [1, 4, 1, 9]> but op produces tensor<fp16, [1, 4, 1, 8]>")
    reject(simple([stmt("y", "fp32", X4, "relu", x="x")]), None, "y", match="declared type tensor<fp32")
    reject(simple(['tensor<fp16, [2]> c = const()[name = string("c"), val = tensor<fp16, [3]>([1.0, 2.0, 3.0])];',
                   stmt("y", "fp16", X4, "relu", x="x")]), None, "c", match="declared type")
    # scalar form and rank-0 tensor form are the same type
    build(simple(['tensor<fp16, []> c = const()[name = string("c"), val = fp16(2.0)];', stmt("y", "fp16", X4, "mul", x="x", y="c")]))


def test_broadcast_error_names_both_shapes():
    text = program({"a": ("fp16", [1, 4, 1, 8]), "b": ("fp16", [1, 3, 1, 8])}, [stmt("y", "fp16", X4, "add", x="a", y="b")], ["y"])
    reject(text, None, "y", match="shapes [1, 4, 1, 8] ('x') and [1, 3, 1, 8] ('y') are not broadcastable")


def test_operand_dtypes():
    body = [const("c", 1, "int32"), stmt("y", "fp16", X4, "add", x="x", y="c")]
    reject(simple(body), None, "y", match="must be fp16 or fp32")
    body = [const("c", 1.0, "fp32"), stmt("y", "fp16", X4, "add", x="x", y="c")]
    reject(simple(body), None, "y", match="must have the same dtype")


def test_non_const_where_const_required():
    text = program({"x": ("fp16", X4), "s": ("fp16", [4])}, [stmt("y", "fp16", X4, "reshape", x="x", shape="s")], ["y"])
    reject(text, None, "y", match="parameter 'shape' must be a const")


def test_no_main_function():
    text = simple([stmt("y", "fp16", X4, "relu", x="x")]).replace("func main<", "func other<")
    reject(text, None, None, match="no function 'main'")


def test_other_functions_are_ignored():
    text = simple([stmt("y", "fp16", X4, "relu", x="x")])
    extra = "    func helper<ios18>(tensor<fp16, [2]> q) {\n        tensor<fp16, [2]> r = rsqrt(x = q)[name = string(\"r\")];\n    } -> (r);\n"
    text = text.replace("    func main<", extra + "    func main<")
    assert build(text)["num_ops"] == 1


def test_blobfile_errors():
    text = simple([blob_const("w", "fp16", X4, "@model_path/weights/w.bin"), stmt("y", "fp16", X4, "add", x="x", y="w")])
    reject(text, None, "w", {"@model_path/weights/other.bin": blob_file(f16(np.zeros(32)))[0]},
           match="'@model_path/weights/w.bin' is not in the weight dictionary (keys: '@model_path/weights/other.bin')")
    reject(text, None, "w", {"@model_path/weights/w.bin": blob_file(np.zeros(32, np.float32))[0]},
           match="expected Float16")
    reject(text, None, "w", {"@model_path/weights/w.bin": blob_file(f16(np.zeros(31)))[0]}, match="size_in_bytes")


def test_weights_are_snapshotted_at_build():
    # C07: the plan owns its weights; the caller's buffer can change after the build without effect
    buf = bytearray(blob_file(f16(np.ones(32)))[0])
    text = simple([blob_const("w", "fp16", X4, "@model_path/weights/w.bin"), stmt("y", "fp16", X4, "add", x="x", y="w")])
    o, _ = run(text, {"@model_path/weights/w.bin": buf}, {"x": f16(np.zeros(X4))})
    assert (o["y"] == 1).all()


# ---- catalogs ---------------------------------------------------------------------------------------------

RUNTIME = {"C02", "C03", "C04", "C05", "C07", "C09", "C12", "C13", "C14", "C42", "C43", "C44"}


def test_constraint_catalog():
    cat = _native.sim_constraints("m4", "strict")
    assert [c["id"] for c in cat] == [f"C{i:02d}" for i in range(1, 48)]
    by = {c["id"]: c for c in cat}
    for cid in RUNTIME:
        assert by[cid]["where"] == "runtime"
    assert by["C11"]["where"] == "runtime, plan"
    for cid in ("C26", "C41", "C46"):
        assert by[cid]["where"] == "cost-model"
    assert by["C31"]["where"] == "none" and not by["C31"]["active"] and "unknown" in by["C31"]["reaction"]
    for c in cat:
        assert set(c) == {"id", "rule", "kind", "confidence", "reaction", "where", "active", "limits"}
        assert c["rule"] and c["confidence"].startswith("[")
    assert by["C20"]["reaction"] == "compile-reject" and by["C18"]["confidence"] == "[X]"
    # the numbers the checks use, published once for the compiler's validation
    assert by["C23"]["limits"] == {"max_rank": 5} and by["C22"]["limits"] == {"max_axis": 65536}
    assert by["C24"]["limits"] == {"max_kernel_width": 15}
    assert by["C25"]["limits"] == {"reject_input_channels": 32000, "warn_input_channels": 8192}
    assert _native.sim_constraints("m1", "strict")[23]["limits"] == {"max_kernel_width": 13}


def test_constraint_catalog_follows_profile():
    m4s = {c["id"]: c for c in _native.sim_constraints("m4", "strict")}
    m1p = {c["id"]: c for c in _native.sim_constraints("m1", "permissive")}
    m1s = {c["id"]: c for c in _native.sim_constraints("m1", "strict")}
    assert not m4s["C28"]["active"] and m1p["C28"]["active"]
    assert m4s["C21"]["active"] and not m1p["C21"]["active"]
    assert m1s["C29"]["active"] and not m1p["C29"]["active"] and not m4s["C29"]["active"]
    assert m4s["C06"]["reaction"] == "compile-reject" and m1p["C06"]["reaction"] == "reproduce"
    assert m1p["C35"]["active"] and not m4s["C35"]["active"]
    assert m1p["C32"]["reaction"] == "compile-reject" and m4s["C32"]["reaction"] == "warn"


def test_op_catalog():
    ops = {o["name"]: o for o in _native.sim_ops("m4", "strict")}
    brief = ["const", "conv", "matmul", "add", "sub", "mul", "real_div", "pow", "maximum", "minimum", "sqrt", "rsqrt",
             "exp", "log", "tanh", "sigmoid", "relu", "softmax", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
             "reduce_prod", "reshape", "transpose", "cast", "slice_by_index", "slice_by_size", "concat", "split",
             "identity", "clip", "layer_norm", "gather", "select", "scaled_dot_product_attention", "band_part", "gelu",
             "silu", "quantize", "dequantize", "constexpr_affine_dequantize"]
    assert set(brief) <= set(ops)
    assert ops["conv"]["params"] == ["x", "weight", "bias?", "strides?", "pad_type?", "pad?", "dilations?", "groups?"]
    # the schema row: types per parameter (in params order), family, output rule, ANE facts
    assert list(ops["conv"]["types"]) == [p.rstrip("?") for p in ops["conv"]["params"]]
    assert ops["conv"]["types"]["groups"] == "const int32" and ops["concat"]["types"]["values"] == "tuple<tensor>"
    assert ops["select"]["types"]["cond"] == "tensor<bool>" and ops["add"]["output"] == "broadcast(x, y)"
    assert ops["conv"]["family"] == "contraction" and ops["reduce_sum"]["family"] == "reduction"
    assert ops["rsqrt"]["constraints"] == ["C20"] and "pow(x, -0.5)" in ops["rsqrt"]["lowering"]
    assert ops["silu"]["lowering"] and not ops["sigmoid"]["lowering"]
    assert ops["constexpr_affine_dequantize"]["attr_params"] and not ops["conv"]["attr_params"]
    assert ops["rsqrt"]["status"] == "rejected (C20)"
    assert ops["gelu"]["status"] == "rejected (C10)"
    assert "C10" in {o["name"]: o for o in _native.sim_ops("m4", "permissive")}["gelu"]["status"]
    assert "C30" in {o["name"]: o for o in _native.sim_ops("m2", "strict")}["matmul"]["status"]


# ---- cost model --------------------------------------------------------------------------------------------

def test_cost_model_conv_vs_matmul():
    cin, cout, s = 512, 512, 64
    data, _ = blob_file(f16(np.zeros([cout, cin, 1, 1])))
    conv = build(simple(conv_body([cout, cin, 1, 1], oshape=[1, cout, 1, s]), params={"x": ("fp16", [1, cin, 1, s])}),
                 {"@model_path/weights/w.bin": data})
    assert conv["flops"] == 2 * cin * cout * s
    assert conv["weight_bytes"] >= cin * cout * 2
    assert conv["activation_bytes"] >= cout * s * 2
    mm_body = [const("f", False, "bool"), stmt("z", "fp16", [s, cout], "matmul", x="a", y="b", transpose_x="f", transpose_y="f")]
    mm = build(program({"a": ("fp16", [s, cin]), "b": ("fp16", [cin, cout])}, mm_body, ["z"]))
    assert mm["flops"] == conv["flops"]
    # C46: same flops, matmul ~3x the compute time of a 1x1 conv (on top of the 0.095 ms dispatch, C41)
    assert (mm["est_ms"] - 0.095) == pytest.approx(3 * (conv["est_ms"] - 0.095), rel=1e-6)
