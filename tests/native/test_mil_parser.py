"""MIL text parser and printer (src/orion_native/mil/): both dialects, every literal form (decimal and hex
floats, ints, bools, strings, int vectors, BLOBFILE), error positions and messages, canonical printing,
robustness and speed."""

from __future__ import annotations

import math
import random
import struct

import numpy as np
import pytest

import orion
from orion import _native, mil

BUILDINFO_18 = (
    '[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, {"coremlc-version", "3505.4.1"}, '
    '{"coremltools-component-milinternal", ""}, {"coremltools-version", "9.0"}})]'
)
BUILDINFO_16 = '[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3505.4.1"}})]'

# Whole programs: an add in both dialects, a linear layer with fp32 I/O and casts, an RMSNorm.
EX_ADD = f"""program(1.3)
{BUILDINFO_18}
{{
    func main<ios18>(tensor<fp16, [1, 256, 1, 128]> a, tensor<fp16, [1, 256, 1, 128]> b) {{
        tensor<fp16, [1, 256, 1, 128]> z = add(x = a, y = b)[name = string("z")];
    }} -> (z);
}}
"""

EX_ADD_LEGACY = f"""program(1.0)
{BUILDINFO_16}
{{
    func main<ios16>(tensor<fp16, [1, 256, 1, 128]> a, tensor<fp16, [1, 256, 1, 128]> b) {{
        tensor<fp16, [1, 256, 1, 128]> z = add(x = a, y = b)[name = tensor<string, []>("z")];
    }} -> (z);
}}
"""

EX_LINEAR = f"""program(1.3)
{BUILDINFO_18}
{{
    func main<ios18>(tensor<fp32, [1, 512, 1, 64]> x) {{
        string to16 = const()[name = string("to16"), val = string("fp16")];
        tensor<fp16, [1, 512, 1, 64]> xh = cast(dtype = to16, x = x)[name = string("xh")];
        string pt = const()[name = string("pt"), val = string("valid")];
        tensor<int32, [2]> st = const()[name = string("st"), val = tensor<int32, [2]>([1, 1])];
        tensor<int32, [4]> pd = const()[name = string("pd"), val = tensor<int32, [4]>([0, 0, 0, 0])];
        tensor<int32, [2]> dl = const()[name = string("dl"), val = tensor<int32, [2]>([1, 1])];
        int32 gr = const()[name = string("gr"), val = int32(1)];
        tensor<fp16, [1024, 512, 1, 1]> w = const()[name = string("w"), val = tensor<fp16, [1024, 512, 1, 1]>(BLOBFILE(path = string("@model_path/weights/proj.bin"), offset = uint64(64)))];
        tensor<fp16, [1, 1024, 1, 1]> pb = const()[name = string("pb"), val = tensor<fp16, [1, 1024, 1, 1]>(BLOBFILE(path = string("@model_path/weights/proj.bin"), offset = uint64(1048704)))];
        tensor<fp16, [1, 1024, 1, 64]> h = conv(dilations = dl, groups = gr, pad = pd, pad_type = pt, strides = st, weight = w, x = xh)[name = string("h")];
        tensor<fp16, [1, 1024, 1, 64]> hb = add(x = h, y = pb)[name = string("hb")];
        string to32 = const()[name = string("to32"), val = string("fp32")];
        tensor<fp32, [1, 1024, 1, 64]> y = cast(dtype = to32, x = hb)[name = string("y")];
    }} -> (y);
}}
"""

EX_RMSNORM = f"""program(1.3)
{BUILDINFO_18}
{{
    func main<ios18>(tensor<fp16, [1, 768, 1, 64]> x) {{
        tensor<fp16, [1, 768, 1, 64]> sq = mul(x = x, y = x)[name = string("sq")];
        tensor<int32, [1]> ax = const()[name = string("ax"), val = tensor<int32, [1]>([1])];
        bool kd = const()[name = string("kd"), val = bool(true)];
        tensor<fp16, [1, 1, 1, 64]> ss = reduce_sum(x = sq, axes = ax, keep_dims = kd)[name = string("ss")];
        fp16 inv_d = const()[name = string("inv_d"), val = fp16(0x1.554p-10)];
        tensor<fp16, [1, 1, 1, 64]> ms = mul(x = ss, y = inv_d)[name = string("ms")];
        fp16 eps = const()[name = string("eps"), val = fp16(0x1.5p-17)];
        tensor<fp16, [1, 1, 1, 64]> mse = add(x = ms, y = eps)[name = string("mse")];
        fp16 nh = const()[name = string("nh"), val = fp16(-0x1p-1)];
        tensor<fp16, [1, 1, 1, 64]> r = pow(x = mse, y = nh)[name = string("r")];
        tensor<fp16, [1, 768, 1, 64]> xn = mul(x = x, y = r)[name = string("xn")];
        tensor<fp16, [1, 768, 1, 1]> g = const()[name = string("g"), val = tensor<fp16, [1, 768, 1, 1]>(BLOBFILE(path = string("@model_path/weights/rms.bin"), offset = uint64(64)))];
        tensor<fp16, [1, 768, 1, 64]> y = mul(x = xn, y = g)[name = string("y")];
    }} -> (y);
}}
"""

# Legacy dialect with every literal spelling it has, two functions and a tuple argument.
EX_LEGACY_FULL = f"""program(1.0)
{BUILDINFO_16}
{{
    func main<ios16>(tensor<fp16, [1, 4, 1, 16]> a, tensor<fp16, [1, 4, 1, 16]> b) {{
        tensor<int32, []> ax = const()[name = tensor<string, []>("ax"), val = tensor<int32, []>(1)];
        tensor<bool, []> il = const()[name = tensor<string, []>("il"), val = tensor<bool, []>(false)];
        tensor<fp16, [1, 8, 1, 16]> c = concat(axis = ax, interleave = il, values = (a, b))[name = tensor<string, []>("c")];
        tensor<fp16, [4, 4, 1, 1]> w = const()[name = tensor<string, []>("w"), val = tensor<fp16, [4, 4, 1, 1]>(BLOBFILE(path = tensor<string, []>("@model_path/weights/w.bin"), offset = tensor<uint64, []>(64)))];
        tensor<string, []> dt = const()[name = tensor<string, []>("dt"), val = tensor<string, []>("fp16")];
        tensor<fp16, []> s = const()[name = tensor<string, []>("s"), val = tensor<fp16, []>(0.125)];
    }} -> (c, w);

    func aux<ios16>(tensor<fp16, [1, 4, 1, 16]> a) {{
        tensor<fp16, [1, 4, 1, 16]> o = identity(x = a)[name = tensor<string, []>("o")];
    }} -> (o);
}}
"""

EXAMPLES = [EX_ADD, EX_ADD_LEGACY, EX_LINEAR, EX_RMSNORM, EX_LEGACY_FULL]


def norm(node):
    """AST dict without source positions, floats rounded to their literal dtype (what the printer
    preserves), NaN made comparable."""
    if isinstance(node, list):
        return [norm(x) for x in node]
    if isinstance(node, dict):
        out = {k: norm(v) for k, v in node.items() if k not in ("line", "column")}
        if node.get("dtype") in ("fp16", "fp32") and "value" in node:
            np_t = np.float16 if node["dtype"] == "fp16" else np.float32
            rnd = lambda v: "nan" if math.isnan(v) else float(np_t(np.float32(v)))  # noqa: E731
            out["value"] = [rnd(v) for v in node["value"]] if isinstance(node["value"], list) else rnd(node["value"])
        return out
    return node


def wrap(stmts: str, dialect: str = "ios18") -> str:
    """A program around statements; statement lines start at line 4."""
    ver = "1.3" if dialect == "ios18" else "1.0"
    return f"program({ver})\n{{\n    func main<{dialect}>() {{\n{stmts}\n    }} -> (c);\n}}\n"


def const_literal(lit: str, dialect: str = "ios18") -> dict:
    name = 'string("c")' if dialect == "ios18" else 'tensor<string, []>("c")'
    prog = mil.parse(wrap(f"        fp16 c = const()[name = {name}, val = {lit}];", dialect))
    return prog["functions"][0]["stmts"][0]["attrs"]["val"]


def printed_literal(lit: str, dialect: str = "ios18") -> str:
    text = mil.format(wrap(f"        fp16 c = const()[val = {lit}];", dialect))
    line = text.splitlines()[3]
    return line[line.index("val = ") + 6: line.rindex("]")]


# ---------------------------------------------------------------------------------------------
# Example programs


@pytest.mark.parametrize("text", EXAMPLES, ids=["add", "add_legacy", "linear", "rmsnorm", "legacy_full"])
def test_examples_round_trip(text):
    ast = mil.parse(text)
    out = mil.format(text)
    assert mil.format(out) == out  # idempotent
    assert norm(mil.parse(out)) == norm(ast)
    if text is not EX_RMSNORM:  # already canonical (no hex floats)
        assert out == text


def test_rmsnorm_canonical_floats():
    out = mil.format(EX_RMSNORM)
    assert "fp16(0.001302)" in out  # 0x1.554p-10: 1/768 in fp16, shortest round-trip decimal
    assert "fp16(1e-05)" in out  # 0x1.5p-17: the fp16 subnormal nearest 1e-5
    assert "fp16(-0.5)" in out
    assert out == (EX_RMSNORM.replace("0x1.554p-10", "0.001302").replace("0x1.5p-17", "1e-05")
                   .replace("-0x1p-1", "-0.5"))


def test_example_structure_linear():
    p = mil.parse(EX_LINEAR)
    assert p["version"] == "1.3" and p["dialect"] == "ios18"
    assert p["buildinfo_type"] == "dict<string, string>"
    assert p["buildinfo"][0] == ["coremlc-component-MIL", "3510.2.1"]
    assert p["buildinfo"][2] == ["coremltools-component-milinternal", ""]
    (f,) = p["functions"]
    assert (f["name"], f["opset"], f["returns"]) == ("main", "ios18", ["y"])
    assert f["params"] == [{"name": "x", "dtype": "fp32", "shape": [1, 512, 1, 64], "scalar_form": False,
                            "line": 4, "column": 22}]
    st = {s["out"]: s for s in f["stmts"]}
    assert st["to16"]["type"] == {"dtype": "string", "shape": [], "scalar_form": True}
    assert st["to16"]["attrs"]["val"]["value"] == "fp16"
    assert st["st"]["attrs"]["val"]["value"] == [1, 1]
    assert st["gr"]["attrs"]["val"]["value"] == 1
    w = st["w"]["attrs"]["val"]
    assert (w["kind"], w["path"], w["offset"], w["shape"]) == ("blobfile", "@model_path/weights/proj.bin", 64, [1024, 512, 1, 1])
    assert st["pb"]["attrs"]["val"]["offset"] == 1048704
    conv = st["h"]
    assert [a["name"] for a in conv["args"]] == ["dilations", "groups", "pad", "pad_type", "strides", "weight", "x"]
    assert all(a["kind"] == "ref" for a in conv["args"]) and conv["args"][-1]["ref"] == "xh"
    assert conv["op"] == "conv" and conv["line"] == 14 and conv["column"] == 9
    assert list(conv["attrs"]) == ["name"] and conv["attrs"]["name"]["value"] == "h"


def test_legacy_structure():
    p = mil.parse(EX_LEGACY_FULL)
    assert p["dialect"] == "ios16" and p["buildinfo_type"] == "dict<tensor<string, []>, tensor<string, []>>"
    assert [f["name"] for f in p["functions"]] == ["main", "aux"]
    main = p["functions"][0]
    assert main["returns"] == ["c", "w"]
    ax = main["stmts"][0]
    assert ax["type"] == {"dtype": "int32", "shape": [], "scalar_form": False}
    assert ax["attrs"]["val"] == {"dtype": "int32", "shape": [], "scalar_form": False, "kind": "scalar",
                                  "value": 1, "line": 5, "column": at(EX_LEGACY_FULL, 5, "tensor<int32, []>(1)")}
    assert ax["attrs"]["name"]["value"] == "ax"
    c = main["stmts"][2]
    assert c["args"][2]["kind"] == "tuple" and c["args"][2]["tuple"] == ["a", "b"]
    w = main["stmts"][3]["attrs"]["val"]
    assert (w["kind"], w["path"], w["offset"]) == ("blobfile", "@model_path/weights/w.bin", 64)
    assert main["stmts"][4]["attrs"]["val"]["value"] == "fp16"
    assert main["stmts"][5]["attrs"]["val"]["value"] == 0.125


# ---------------------------------------------------------------------------------------------
# Dialects, layout, whitespace


def test_ios17_opset_and_multiple_functions():
    text = ("program(1.3)\n{\n    func main<ios17>(fp16 x) {\n        fp16 y = identity(x = x)[name = string(\"y\")];\n"
            "    } -> (y);\n\n    func other<ios18>(fp16 x, int32 n) {\n"
            "        fp16 y = identity(x = x)[name = string(\"y\")];\n        fp16 z = identity(x = y)[name = string(\"z\")];\n"
            "    } -> (y, z);\n}\n")
    p = mil.parse(text)
    assert [(f["name"], f["opset"], f["returns"]) for f in p["functions"]] == [("main", "ios17", ["y"]),
                                                                                ("other", "ios18", ["y", "z"])]
    assert p["buildinfo"] == [] and p["buildinfo_type"] == ""
    assert mil.format(text) == text


def test_whitespace_and_comments_insensitive():
    compact = (
        'program(1.3)[buildInfo=dict<string,string>({{"coremlc-component-MIL","3510.2.1"},{"coremlc-version","3505.4.1"},'
        '{"coremltools-component-milinternal",""},{"coremltools-version","9.0"}})]{func main<ios18>('
        "tensor<fp16,[1,256,1,128]>a,tensor<fp16,[1,256,1,128]>b){tensor<fp16,[1,256,1,128]>z=add(x=a,y=b)"
        '[name=string("z")];}->(z);}'
    )
    assert mil.format(compact) == EX_ADD
    spaced = "// leading comment\n" + EX_ADD.replace(" = ", "   =\t").replace(", ", " ,\r\n  // c\n ").replace(
        "(", " ( ").replace(";", " ; // trailing comment é\n")
    assert mil.format(spaced) == EX_ADD
    assert mil.format(EX_ADD.replace("\n", "\r\n")) == EX_ADD


def test_bytes_and_str_inputs():
    assert mil.format(EX_ADD.encode()) == mil.format(EX_ADD) == EX_ADD
    assert _native.mil_format(bytearray(EX_ADD.encode())) == EX_ADD
    assert mil.parse(EX_ADD.encode()) == mil.parse(EX_ADD)
    with pytest.raises(TypeError):
        mil.format(123)


def test_legacy_printer_spells_bare_scalars_as_rank0_tensors():
    # A bare scalar in a program(1.0) is printed in the legacy spelling (the program's own dialect).
    text = wrap('        fp16 c = const()[name = string("c"), val = fp16(0.5)];', "ios16")
    out = mil.format(text)
    assert 'tensor<fp16, []> c = const()[name = tensor<string, []>("c"), val = tensor<fp16, []>(0.5)];' in out
    assert mil.format(out) == out
    # ... while a rank-0 tensor spelling in an iOS18 program keeps its spelling.
    text = wrap('        tensor<fp16, []> c = const()[val = tensor<fp16, []>(0.5)];')
    assert "tensor<fp16, []> c = const()[val = tensor<fp16, []>(0.5)];" in mil.format(text)


def test_blobfile_printed_in_dialect():
    lit = "tensor<fp16, [2, 2]>(BLOBFILE(path = string(\"@model_path/w.bin\"), offset = uint64(128)))"
    legacy = ("tensor<fp16, [2, 2]>(BLOBFILE(path = tensor<string, []>(\"@model_path/w.bin\"), "
              "offset = tensor<uint64, []>(128)))")
    assert printed_literal(lit) == lit
    assert printed_literal(legacy) == lit  # argument spelling follows the program's dialect
    assert printed_literal(lit, "ios16") == legacy
    assert printed_literal(legacy, "ios16") == legacy
    assert const_literal(legacy)["offset"] == 128


def test_op_forms():
    text = wrap(
        "        tensor<fp16, [1, 8, 1, 4]> c = concat(axis = cax, interleave = cid, values = (a, b,c))[name = string(\"c\")];\n"
        "        tensor<fp16, [1, 8, 1, 4]> d = matmul(transpose_x = bool(false), x = a, y = tensor<fp16, [1]>([2]))"
        "[name = string(\"d\")];\n"
        "        tensor<int8, [4, 4]> q = constexpr_affine_dequantize()[axis = int32(0), name = string(\"q\"), "
        "quantized_data = tensor<int8, [4, 4]>(BLOBFILE(path = string(\"@model_path/q.bin\"), offset = uint64(64))), "
        "scale = fp16(0x1p-3), zero_point = int8(0)];\n"
        "        fp16 e = some_op()"  # no attribute list: syntactically fine (the simulator requires name)
        ";\n        fp16 f = other()[];")
    f = mil.parse(text)["functions"][0]
    c, d, q, e, g = f["stmts"]
    assert c["args"][2] == {"name": "values", "kind": "tuple", "tuple": ["a", "b", "c"], "line": 4,
                            "column": at(text, 4, "values")}
    assert d["args"][0]["kind"] == "literal" and d["args"][0]["literal"]["value"] is False
    assert d["args"][2]["literal"]["value"] == [2.0]
    assert list(q["attrs"]) == ["axis", "name", "quantized_data", "scale", "zero_point"]
    assert q["attrs"]["scale"]["value"] == 0.125 and q["attrs"]["quantized_data"]["kind"] == "blobfile"
    assert e["attrs"] == {} and e["args"] == [] and g["attrs"] == {}
    out = mil.format(text)
    assert "values = (a, b, c)" in out and "scale = fp16(0.125)" in out
    assert "fp16 e = some_op();" in out and "fp16 f = other();" in out
    assert norm(mil.parse(out)) == norm(mil.parse(text))


# ---------------------------------------------------------------------------------------------
# Literal forms

TINY = "0." + "0" * 400 + "1"  # far below double range: 0
LITERALS = [
    # (literal, dtype, value, canonical print)
    ("fp16(0.125)", "fp16", 0.125, "fp16(0.125)"),
    ("fp16(1e-05)", "fp16", 1e-05, "fp16(1e-05)"),
    ("fp16(1E-5)", "fp16", 1e-05, "fp16(1e-05)"),
    ("fp16(-0.5)", "fp16", -0.5, "fp16(-0.5)"),
    ("fp16(+2)", "fp16", 2.0, "fp16(2.0)"),
    ("fp16(.5)", "fp16", 0.5, "fp16(0.5)"),
    ("fp16(5.)", "fp16", 5.0, "fp16(5.0)"),
    ("fp16(0.1)", "fp16", 0.1, "fp16(0.1)"),
    ("fp16(0.333333333)", "fp16", 0.333333333, "fp16(0.3333)"),
    ("fp16(65504)", "fp16", 65504.0, "fp16(65504.0)"),
    ("fp16(1e-8)", "fp16", 1e-8, "fp16(0.0)"),  # underflows to 0 in fp16
    ("fp16(-0.0)", "fp16", -0.0, "fp16(-0.0)"),
    ("fp16(1e-400)", "fp16", 0.0, "fp16(0.0)"),  # below double range: 0, not an error
    (f"fp16({TINY})", "fp16", 0.0, "fp16(0.0)"),
    ("fp16(0x1p-3)", "fp16", 0.125, "fp16(0.125)"),
    ("fp16(0x1.554p-10)", "fp16", float.fromhex("0x1.554p-10"), "fp16(0.001302)"),
    ("fp16(0x1.5p-17)", "fp16", float.fromhex("0x1.5p-17"), "fp16(1e-05)"),
    ("fp16(-0x1p-1)", "fp16", -0.5, "fp16(-0.5)"),
    ("fp16(0X1.8P+1)", "fp16", 3.0, "fp16(3.0)"),
    ("fp16(0x10)", "fp16", 16.0, "fp16(16.0)"),
    ("fp16(inf)", "fp16", math.inf, "fp16(inf)"),
    ("fp16(-inf)", "fp16", -math.inf, "fp16(-inf)"),
    ("fp16(nan)", "fp16", math.nan, "fp16(nan)"),
    ("fp32(1.0)", "fp32", 1.0, "fp32(1.0)"),
    ("fp32(0.1)", "fp32", 0.1, "fp32(0.1)"),
    ("fp32(1e-7)", "fp32", 1e-7, "fp32(1e-07)"),
    ("fp32(3.4028234e38)", "fp32", 3.4028234e38, "fp32(3.4028235e+38)"),
    ("fp32(16777217)", "fp32", 16777217.0, "fp32(16777216.0)"),
    ("int32(1)", "int32", 1, "int32(1)"),
    ("int32(-1)", "int32", -1, "int32(-1)"),
    ("int32(2147483647)", "int32", 2147483647, "int32(2147483647)"),
    ("int32(-2147483648)", "int32", -2147483648, "int32(-2147483648)"),
    ("int32(0x7fffffff)", "int32", 2147483647, "int32(2147483647)"),
    ("int32(007)", "int32", 7, "int32(7)"),
    ("int8(0)", "int8", 0, "int8(0)"),
    ("int8(-128)", "int8", -128, "int8(-128)"),
    ("uint8(255)", "uint8", 255, "uint8(255)"),
    ("int16(-32768)", "int16", -32768, "int16(-32768)"),
    ("uint16(65535)", "uint16", 65535, "uint16(65535)"),
    ("uint32(4294967295)", "uint32", 4294967295, "uint32(4294967295)"),
    ("uint64(18446744073709551615)", "uint64", 2**64 - 1, "uint64(18446744073709551615)"),
    ("bool(true)", "bool", True, "bool(true)"),
    ("bool(false)", "bool", False, "bool(false)"),
    ('string("valid")', "string", "valid", 'string("valid")'),
    ('string("")', "string", "", 'string("")'),
    ('string("a\\"b\\\\c")', "string", 'a"b\\c', 'string("a\\"b\\\\c")'),
    ('string("tab\\there\\nnl\\r")', "string", "tab\there\nnl\r", 'string("tab\\there\\nnl\\r")'),
    ('string("h\u00e9llo \u4e16\u754c \U0001f600")', "string", "h\u00e9llo \u4e16\u754c \U0001f600",
     'string("h\u00e9llo \u4e16\u754c \U0001f600")'),
    ('string("// not a comment")', "string", "// not a comment", 'string("// not a comment")'),
]


@pytest.mark.parametrize("lit,dtype,value,printed", LITERALS, ids=[x[0][:40] for x in LITERALS])
def test_scalar_literals(lit, dtype, value, printed):
    node = const_literal(lit)
    assert node["kind"] == "scalar" and node["dtype"] == dtype and node["scalar_form"] and node["shape"] == []
    got = node["value"]
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(got)
    else:
        assert got == value and type(got) is type(value)
        if isinstance(value, float):
            assert math.copysign(1, got) == math.copysign(1, value)
    assert printed_literal(lit) == printed
    assert printed_literal(printed) == printed
    legacy = printed.replace(f"{dtype}(", f"tensor<{dtype}, []>(", 1)
    assert printed_literal(lit, "ios16") == legacy
    assert printed_literal(legacy, "ios16") == legacy
    leg = const_literal(legacy, "ios16")
    assert leg["kind"] == "scalar" and not leg["scalar_form"] and leg["dtype"] == dtype


TENSORS = [
    ("tensor<int32, [4]>([0, 1, 3, 2])", "int32", [4], [0, 1, 3, 2], None),
    ("tensor<int32, [1]>([1])", "int32", [1], [1], None),
    ("tensor<int32,[4]>([0,1,-3,0x2])", "int32", [4], [0, 1, -3, 2], "tensor<int32, [4]>([0, 1, -3, 2])"),
    ("tensor<int32, [0]>([])", "int32", [0], [], None),
    ("tensor<int32, [2, 0, 3]>([])", "int32", [2, 0, 3], [], None),
    ("tensor<fp16, [2, 2]>([1, 2.5, -3e0, 0x1p-2])", "fp16", [2, 2], [1.0, 2.5, -3.0, 0.25],
     "tensor<fp16, [2, 2]>([1.0, 2.5, -3.0, 0.25])"),
    ("tensor<fp32, [3]>([0.1, -inf, nan])", "fp32", [3], [0.1, -math.inf, math.nan], None),
    ("tensor<bool, [2]>([true, false])", "bool", [2], [True, False], None),
    ('tensor<string, [2]>(["a", "b\\"c"])', "string", [2], ["a", 'b"c'], None),
    ("tensor<int8, [1, 1, 1, 3]>([-128, 0, 127])", "int8", [1, 1, 1, 3], [-128, 0, 127], None),
    ("tensor<uint64, [1]>([18446744073709551615])", "uint64", [1], [2**64 - 1], None),
    ("tensor<fp16, []>([0.5])", "fp16", [], [0.5], None),  # rank 0 written as a one-element list
]


@pytest.mark.parametrize("lit,dtype,shape,values,printed", TENSORS, ids=[x[0][:40] for x in TENSORS])
def test_tensor_literals(lit, dtype, shape, values, printed):
    node = const_literal(lit)
    assert (node["kind"], node["dtype"], node["shape"], node["scalar_form"]) == ("tensor", dtype, shape, False)
    assert len(node["value"]) == len(values)
    for g, v in zip(node["value"], values):
        assert (math.isnan(g) and math.isnan(v)) if isinstance(v, float) and math.isnan(v) else g == v
    printed = printed or lit
    assert printed_literal(lit) == printed
    assert printed_literal(lit, "ios16") == printed  # tensor spelling is the same in both dialects


def test_legacy_rank0_scalar_literals():
    for lit, value in [("tensor<int32, []>(1)", 1), ('tensor<string, []>("valid")', "valid"),
                       ("tensor<fp16, []>(0x1p-3)", 0.125), ("tensor<bool, []>(true)", True),
                       ("tensor<uint64, []>(64)", 64), ("tensor<int8, []>(-7)", -7)]:
        node = const_literal(lit, "ios16")
        assert (node["kind"], node["shape"], node["scalar_form"], node["value"]) == ("scalar", [], False, value)


HEX_FLOATS = ["0x1p-3", "0x1.554p-10", "0x1.5p-17", "-0x1p-1", "0x1.ffcp15", "0x1p-24", "0x1.fffffep127",
              "0x1p-149", "0x1.0000000000001p0", "0x.8p1", "0x1.p3", "0xABC.DEFp-12", "0x1P+0", "0x0p0",
              "0x1.23456789abcdefp-1000", "0x1p1023"]


@pytest.mark.parametrize("h", HEX_FLOATS)
def test_hex_floats_exact(h):
    body = h[1:] if h.startswith("-") else h
    want = float.fromhex(body) * (-1 if h.startswith("-") else 1)
    dtype = "fp16" if abs(want) <= 65504 else "fp32"
    if abs(want) > float.fromhex("0x1.fffffep127"):
        with pytest.raises(orion.MILSyntaxError, match="out of range"):
            const_literal(f"fp32({h})")
        return
    node = const_literal(f"{dtype}({h})")
    assert node["value"] == want  # exact: the value as written, bit for bit
    assert const_literal(f"tensor<fp32, [1]>([{h}])")["value"] == [want]


def test_all_fp16_values_print_shortest_round_trip():
    bits = np.arange(0, 0x10000, dtype=np.uint16)
    vals = bits.view(np.float16)
    finite = vals[np.isfinite(vals)]
    lit = f"tensor<fp16, [{finite.size}]>([" + ", ".join(float(v).hex() for v in finite) + "])"
    printed = printed_literal(lit)
    inner = printed[printed.index("([") + 2: -2].split(", ")
    assert len(inner) == finite.size
    back = np.array([float(s) for s in inner], dtype=np.float32).astype(np.float16)
    assert np.array_equal(back.view(np.uint16), finite.view(np.uint16))  # bit-exact, -0.0 included
    for s, v in zip(inner, finite):
        if float(v) == int(v):
            assert s == f"{int(v)}.0" or s == "-0.0"  # integral values print exactly
            continue
        digits = s.lstrip("-").split("e")[0].replace(".", "").lstrip("0").rstrip("0")
        assert len(digits) <= 5, s  # fp16 never needs more than 5 significant digits
        assert len(digits) <= len(np.format_float_scientific(v, unique=True).split("e")[0].replace(".", "")
                                  .lstrip("-").rstrip("0")) + 1, (s, v)  # as short as numpy's (+1 for ties)
    assert printed_literal(printed) == printed  # idempotent


def test_fp32_values_print_shortest_round_trip():
    rng = np.random.default_rng(7)
    vals = rng.integers(0, 2**32, size=4000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    vals = vals[np.isfinite(vals)]
    lit = f"tensor<fp32, [{vals.size}]>([" + ", ".join(float(v).hex() for v in vals) + "])"
    printed = printed_literal(lit)
    inner = printed[printed.index("([") + 2: -2].split(", ")
    back = np.array([float(s) for s in inner], dtype=np.float64).astype(np.float32)
    assert np.array_equal(back.view(np.uint32), vals.view(np.uint32))
    for s, v in zip(inner, vals):
        assert "e" in s or "." in s
        if float(v) == int(v) and abs(v) < 1e16:
            assert s == f"{int(v)}.0" or s == "-0.0"
            continue
        mine = s.lstrip("-").split("e")[0].replace(".", "").lstrip("0").rstrip("0")
        ref = np.format_float_scientific(v, unique=True).split("e")[0].replace(".", "").lstrip("-").rstrip("0")
        assert len(mine) <= len(ref) + 1, (s, v)  # numpy's shortest, +1 for double-rounding ties


# ---------------------------------------------------------------------------------------------
# Errors: position and message


def err(text):
    with pytest.raises(orion.MILSyntaxError) as ei:
        mil.format(text)
    e = ei.value
    assert isinstance(e, ValueError) and isinstance(e, orion.OrionError)
    assert str(e).startswith(f"MIL syntax error at {e.line}:{e.column}: ")
    return e


def at(text, line, marker, nth=0):
    """1-based column of the nth occurrence of marker on the 1-based line."""
    row = text.split("\n")[line - 1]
    col = -1
    for _ in range(nth + 1):
        col = row.index(marker, col + 1)
    return col + 1


S = "        "  # statement indent; statements from wrap() start at line 4
ERRORS = [
    # (text, line, column marker on that line (or column int), message parts)
    (wrap(S + 'fp16 y = mul(x = x, y = x)[name = string("y")]'), 5, "}", ["expected ';' at the end of the statement", "found '}'"]),
    (wrap(S + 'fp16 y = mul(x = x, y = x;'), 4, ";", ["expected ',' or ')' after argument", "found ';'"]),
    (wrap(S + 'fp16 y = mul(x = x y = x);'), 4, "y = x)", ["expected ',' or ')' after argument", "found 'y'"]),
    (wrap(S + 'fp16 y = mul(x = , y = x);'), 4, ", y", ["expected argument value", "found ','"]),
    (wrap(S + 'fp16 y = mul(x = x, )[name = string("y")];'), 4, ")", ["expected argument name", "found ')'"]),
    (wrap(S + 'fp16 y mul(x = x);'), 4, "mul", ["expected '=' after the result name", "found 'mul'"]),
    (wrap(S + 'fp16 = mul(x = x);'), 4, "=", ["expected result name", "found '='"]),
    (wrap(S + 'float16 y = mul(x = x);'), 4, "float16", ["expected statement type", "found 'float16'"]),
    (wrap(S + '42 y = mul(x = x);'), 4, "42", ["expected a statement", "found '42'"]),
    (wrap(S + 'fp16 y = mul(x = x)[name = string("y)];'), 4, '"y', ["unterminated string literal"]),
    (wrap(S + 'fp16 y = mul(x = x)[name = "y"];'), 4, '"y"', ["expected literal value for attribute 'name'", 'found string "y"']),
    (wrap(S + 'fp16 y = mul(x = x)[name = y];'), 4, "y]", ["expected literal value for attribute 'name'", "found 'y'"]),
    (wrap(S + 'fp16 y = mul(x = x)[name = string("y")'), 5, "}", ["expected ',' or ']' in the attribute list", "found '}'"]),
    (wrap(S + 'fp16 y = mul(x = float16(1));'), 4, "float16", ["expected literal", "found 'float16'"]),
    (wrap(S + 'tensor<fp16, [1, -1]> y = mul(x = x);'), 4, "-", ["expected dimension (a non-negative decimal integer)", "found '-'"]),
    (wrap(S + 'tensor<fp16, [1, 1.5]> y = mul(x = x);'), 4, "1.5", ["expected dimension", "found '1.5'"]),
    (wrap(S + 'tensor<fp16, [1, 99999999999]> y = mul(x = x);'), 4, "999", ["dimension '99999999999' too large"]),
    (wrap(S + 'tensor<fp16, [1, 2> y = mul(x = x);'), 4, ">", ["expected ',' or ']' in the tensor shape", "found '>'"]),
    (wrap(S + 'tensor<fp17, [1]> y = mul(x = x);'), 4, "fp17", ["expected tensor element type", "found 'fp17'"]),
    (wrap(S + 'tensor<fp16 [1]> y = mul(x = x);'), 4, "[", ["expected ',' after the tensor element type", "found '['"]),
    # literal well-formedness
    (wrap(S + 'tensor<int32, [4]> c = const()[val = tensor<int32, [4]>([0, 1, 3])];'), 4, "tensor<int32, [4]>(",
     ["tensor<int32, [4]> literal has 3 values, expected 4"]),
    (wrap(S + 'tensor<int32, [2, 2]> c = const()[val = tensor<int32, [2, 2]>([0, 1, 3, 2, 5])];'), 4, "tensor<int32, [2, 2]>(",
     ["has 5 values, expected 4"]),
    (wrap(S + 'tensor<int32, [0]> c = const()[val = tensor<int32, [0]>([1])];'), 4, "tensor<int32, [0]>(", ["has 1 value, expected 0"]),
    (wrap(S + 'tensor<int32, [2]> c = const()[val = tensor<int32, [2]>(1)];'), 4, "1)]",
     ["expected '[' or BLOBFILE in the tensor<int32, [2]> literal", "found '1'"]),
    (wrap(S + 'int8 c = const()[val = int8(200)];'), 4, "200", ["value 200 out of range for int8 [-128, 127]"]),
    (wrap(S + 'int8 c = const()[val = int8(-129)];'), 4, "-129", ["value -129 out of range for int8"]),
    (wrap(S + 'uint8 c = const()[val = uint8(-1)];'), 4, "-1", ["value -1 out of range for uint8 [0, 255]"]),
    (wrap(S + 'int32 c = const()[val = int32(2147483648)];'), 4, "2147", ["out of range for int32"]),
    (wrap(S + 'uint64 c = const()[val = uint64(18446744073709551616)];'), 4, "1844", ["out of range for uint64"]),
    (wrap(S + 'int32 c = const()[val = int32(99999999999999999999999999)];'), 4, "9999", ["out of range for int32"]),
    (wrap(S + 'int32 c = const()[val = int32(1.5)];'), 4, "1.5", ["expected an integer for a int32 literal", "found '1.5'"]),
    (wrap(S + 'int32 c = const()[val = int32(1e3)];'), 4, "1e3", ["expected an integer"]),
    (wrap(S + 'int32 c = const()[val = int32(true)];'), 4, "true", ["expected integer for a int32 literal", "found 'true'"]),
    (wrap(S + 'fp16 c = const()[val = fp16("x")];'), 4, '"x"', ["expected number, inf or nan for a fp16 literal", 'found string "x"']),
    (wrap(S + 'fp16 c = const()[val = fp16(70000)];'), 4, "70000", ["value 70000 out of range for fp16 (max 65504)"]),
    (wrap(S + 'fp16 c = const()[val = fp16(-1e999)];'), 4, "-1e999", ["value -1e999 out of range for fp16"]),
    (wrap(S + 'fp32 c = const()[val = fp32(1e39)];'), 4, "1e39", ["out of range for fp32"]),
    (wrap(S + 'fp16 c = const()[val = fp16(1.2.3)];'), 4, "1.2.3", ["malformed number '1.2.3'"]),
    (wrap(S + 'fp16 c = const()[val = fp16(0x1.8)];'), 4, "0x1.8", ["hex float needs a 'p' exponent"]),
    (wrap(S + 'fp16 c = const()[val = fp16(1e)];'), 4, "1e", ["malformed number '1e': exponent has no digits"]),
    (wrap(S + 'fp16 c = const()[val = fp16(12abc)];'), 4, "12abc", ["malformed number '12abc'"]),
    (wrap(S + 'fp16 c = const()[val = fp16(--1)];'), 4, "-1", ["expected number, inf or nan", "found '-'"]),
    (wrap(S + 'fp16 c = const()[val = fp16(infinity)];'), 4, "infinity", ["found 'infinity'"]),
    (wrap(S + 'bool c = const()[val = bool(1)];'), 4, "1)", ["expected true or false for a bool literal", "found '1'"]),
    (wrap(S + 'string c = const()[val = string(fp16)];'), 4, "fp16)", ["expected quoted string value", "found 'fp16'"]),
    (wrap(S + 'string c = const()[val = string("a\\qb")];'), 4, "\\q", ["invalid escape '\\q' in string literal"]),
    (wrap(S + 'int32 c = const()[val = int32(1, 2)];'), 4, ",", ["expected ')' to close the literal", "found ','"]),
    (wrap(S + 'fp16 c = const()[val = tensor<fp16, [2]>(BLOBFILE(path = string("w.bin"), offset = int32(64)))];'), 4,
     "int32(64)", ["BLOBFILE offset must be a uint64 literal, found int32"]),
    (wrap(S + 'fp16 c = const()[val = tensor<fp16, [2]>(BLOBFILE(offset = uint64(64), path = string("w.bin")))];'), 4,
     "offset", ["expected 'path' as the first BLOBFILE argument", "found 'offset'"]),
    (wrap(S + 'fp16 c = const()[val = tensor<fp16, [2]>(BLOBFILE(path = "w.bin", offset = uint64(64)))];'), 4,
     '"w.bin"', ["expected string literal for the BLOBFILE path", 'found string "w.bin"']),
    (wrap(S + 'fp16 c = const()[val = tensor<fp16, [2]>(BLOBFILE(path = tensor<string, [1]>(["w"]), offset = uint64(64)))];'),
     4, "tensor<string", ["BLOBFILE path must be a scalar"]),
    (wrap(S + 'fp16 c = const()[val = BLOBFILE(path = string("w.bin"), offset = uint64(64))];'), 4, "BLOBFILE",
     ["expected literal value for attribute 'val'", "found 'BLOBFILE'"]),
    # header, function, program structure
    ("", 1, 1, ["expected 'program' at the start of the text", "found end of input"]),
    ("   \n  // only a comment\n", 3, 1, ["expected 'program'", "found end of input"]),
    ("progra(1.3)", 1, 1, ["expected 'program'", "found 'progra'"]),
    ("program(1.3", 1, 12, ["expected ')' after the program version", "found end of input"]),
    ("program(13)\n{}", 1, "13", ["expected program version such as 1.3", "found '13'"]),
    ("program(1.3)\n{\n}\n", 3, 1, ["expected 'func'", "found '}'"]),
    ("program(1.3)\n[buildInfo = dict<string, string>({{\"a\", \"b\"}, {\"c\"}})]\n{}", 2, "}})]",
     ["expected ',' after the buildInfo key", "found '}'"]),
    ("program(1.3)\n[buildInfo = dict<string, string>({{\"a\", \"b\"}})\n{}", 3, 1,
     ["expected ']' to close the program attributes", "found '{'"]),
    ("program(1.3)\n[buildinfo = dict<string, string>({})]\n{}", 2, "buildinfo", ["expected 'buildInfo'", "found 'buildinfo'"]),
    ("program(1.3)\n{\n    func main<ios19>() {\n    } -> (x);\n}\n", 3, "ios19", ["expected opset ios16, ios17 or ios18", "found 'ios19'"]),
    ("program(1.3)\n{\n    func main<ios18>(fp16 a fp16 b) {\n    } -> (x);\n}\n", 3, "fp16 b",
     ["expected ',' or ')' in the parameter list", "found 'fp16'"]),
    ("program(1.3)\n{\n    func main<ios18>(fp16) {\n    } -> (x);\n}\n", 3, ")", ["expected parameter name", "found ')'"]),
    ("program(1.3)\n{\n    func main<ios18>() {\n    } (x);\n}\n", 4, "(", ["expected '->' after the function body", "found '('"]),
    ("program(1.3)\n{\n    func main<ios18>() {\n    } -> ();\n}\n", 4, ")", ["expected return value name", "found ')'"]),
    ("program(1.3)\n{\n    func main<ios18>() {\n    } -> (a b);\n}\n", 4, "b", ["expected ')' (or ',') in the return list", "found 'b'"]),
    ("program(1.3)\n{\n    func main<ios18>() {\n    } -> (a)\n}\n", 5, 1, ["expected ';' after the return list", "found '}'"]),
    ("program(1.3)\n{\n    func main<ios18>() {\n    } -> (a);\n", 5, 1, ["expected 'func' or '}'", "found end of input"]),
    ("program(1.3)\n{\n    func main<ios18>() {\n", 4, 1, ["expected a statement", "or '}'", "found end of input"]),
    ("program(1.3)\n{\n    func main<ios18>() {\n    } -> (a);\n}\n}", 6, 1,
     ["expected end of input after the program's closing '}'", "found '}'"]),
    # lexical
    (wrap(S + "fp16 y = mul(x = @x);"), 4, "@", ["unexpected character '@'"]),
    (wrap(S + "fp16 y = mul(x = x) / 2;"), 4, "/", ["unexpected character '/'"]),
    (wrap(S + "fp16 y = mul(x = x\x00);"), 4, "\x00", ["unexpected control character 0x00"]),
    (wrap(S + 'fp16 y = mul(x = string("a\x01"));'), 4, "\x01", ["control character 0x01 in string literal"]),
    (wrap(S + "fp16 y = mul(x = x\u00e9);"), 4, "\u00e9", ["unexpected character '\u00e9'"]),
    (wrap(S + 'fp16 y = mul(x = string("\u00e9\u00e9"), z = %);'), 4, "%", ["unexpected character '%'"]),  # columns count characters
    (wrap(S + 'fp16 y = mul(x = string("ab\ncd"));'), 4, '"ab', ["unterminated string literal", "end of line"]),
    (wrap(S + 'fp16 y = mul(x = x)[name = string("y\\'), 4, '"y', ["unterminated string literal"]),
]


@pytest.mark.parametrize("text,line,col,parts", ERRORS, ids=[f"{i}:{e[3][0][:40]}" for i, e in enumerate(ERRORS)])
def test_error_positions_and_messages(text, line, col, parts):
    e = err(text)
    column = col if isinstance(col, int) else at(text, line, col)
    assert (e.line, e.column) == (line, column), str(e)
    for p in parts:
        assert p in str(e), str(e)


def test_invalid_utf8_reported_at_the_byte():
    base = wrap(S + 'fp16 c = const()[name = string("ok"), val = string("ab\xe9")];').encode()
    i = base.index(b"\xc3\xa9")
    for bad in (b"\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80"):
        text = base[:i] + bad + base[i + 2:]
        with pytest.raises(orion.MILSyntaxError) as ei:
            _native.mil_format(text)
        e = ei.value
        row = text.split(b"\n")[3]
        assert (e.line, e.column) == (4, row.index(bad) + 1), str(e)
        assert "invalid UTF-8 byte 0x" in str(e) and "in string literal" in str(e)
    # outside strings and in comments, too
    for text, where in [(b"program(1.3)\n\xfe", ""), (b"program(1.3) // \xe2\x82\n{", " in comment")]:
        with pytest.raises(orion.MILSyntaxError, match="invalid UTF-8 byte 0x") as ei:
            mil.format(text)
        assert str(ei.value).endswith(where) and (ei.value.line, ei.value.column) == ((2, 1) if not where else (1, 17))
    # a Python str with a lone surrogate cannot be UTF-8 either
    with pytest.raises(orion.MILSyntaxError, match="invalid UTF-8 byte 0xed") as ei:
        mil.format('program(1.3) // \ud800')
    assert (ei.value.line, ei.value.column) == (1, 17)


def test_hostile_inputs_fail_cleanly():
    cases = [
        "(" * 200000, "[" * 200000, "tensor<" * 50000, "program(1.3){" + "func " * 50000,
        "program(1.3)\n{\n func main<ios18>() {\n fp16 c = const()[val = fp16(" + "9" * 100000 + ")];\n } -> (c);\n}",
        "program(1.3)\n{\n func main<ios18>() {\n fp16 c = const()[val = fp16(0x1p" + "9" * 1000 + ")];\n } -> (c);\n}",
        "program(1.3)\n{\n func main<ios18>() {\n fp16 c = const()[val = tensor<fp16, [2147483647, 2147483647, 2147483647]>([1])];\n } -> (c);\n}",
        'program(1.3)\n[buildInfo = dict<string, string>({{"' + "x" * 100000,
        "\x00" * 1000, "\xff" * 10, "program(" + "1" * 100000 + ".3)", "program(1.3)\n{\n" + "/" * 1001,
    ]
    for text in cases:
        e = err(text)
        assert e.line >= 1 and e.column >= 1
        assert len(str(e)) < 400  # offending tokens are truncated in messages


# ---------------------------------------------------------------------------------------------
# Robustness: random mutations of valid programs


def mutate(rng: random.Random, data: bytes) -> bytes:
    pieces = [b"(", b")", b"[", b"]", b"{", b"}", b"<", b">", b",", b";", b"=", b"-", b"+", b"->", b'"', b"\\",
              b" ", b"\n", b"\t", b"\x00", b"\xff", b"\xc3", b"\xe2\x82\xac", b"//", b"0", b"1", b"9", b".", b"e",
              b"p", b"x", b"0x1p-3", b"1e999", b"-0", b"nan", b"inf", b"tensor<", b"fp16", b"int8", b"uint64",
              b"string", b"bool", b"true", b"BLOBFILE(", b"func", b"program", b"[]", b"()", b"[0]", b"99999999999"]
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        i = rng.randrange(len(data) + 1)
        j = min(len(data), i + rng.randint(1, 12))
        if op == 0:
            del data[i:j]
        elif op == 1:
            data[i:i] = rng.choice(pieces)
        elif op == 2 and i < len(data):
            data[i] = rng.randrange(256)
        elif op == 3:
            data[i:i] = data[i:j] * rng.randint(1, 3)
        elif op == 4:
            k = rng.randrange(len(data) + 1)
            a, b = data[i:j], data[k:k + (j - i)]
            if k >= j:
                data[k:k + len(b)] = a
                data[i:j] = b
        elif op == 5:
            del data[rng.randrange(len(data) + 1):]
        else:
            data[i:i] = bytes([rng.choice(b"0123456789")]) * rng.randint(1, 30)
    return bytes(data)


def test_random_mutations_only_raise_syntax_errors():
    rng = random.Random(20240601)
    seeds = [t.encode() for t in EXAMPLES]
    ok = failed = 0
    for n in range(4000):
        text = mutate(rng, rng.choice(seeds))
        try:
            out = _native.mil_format(text)
        except orion.MILSyntaxError as e:
            failed += 1
            assert 1 <= e.line <= text.count(b"\n") + 1 and e.column >= 1, (text, e)
            continue
        ok += 1
        assert _native.mil_format(out) == out, text
        a, b = norm(mil.parse(text)), norm(mil.parse(out))
        if a != b:  # only the legacy dialect may respell bare scalar types (scalar_form) when printing
            assert mil.parse(text)["dialect"] == "ios16", text
            assert _strip_scalar_form(a) == _strip_scalar_form(b), text
    assert ok > 100 and failed > 1000  # both outcomes are exercised


def _strip_scalar_form(node):
    if isinstance(node, list):
        return [_strip_scalar_form(x) for x in node]
    if isinstance(node, dict):
        return {k: _strip_scalar_form(v) for k, v in node.items() if k != "scalar_form"}
    return node


# ---------------------------------------------------------------------------------------------
# Speed


def big_program(n: int) -> str:
    lines = ["program(1.3)", BUILDINFO_18, "{", "    func main<ios18>(tensor<fp16, [1, 768, 1, 64]> x) {"]
    prev, c = "x", "x"
    for i in range(n):
        if i % 3 == 0:
            lines.append(f'        fp16 c{i} = const()[name = string("c{i}"), val = fp16(0x1.554p-10)];')
            c = f"c{i}"
        elif i % 3 == 1:
            lines.append(f'        tensor<int32, [4]> p{i} = const()[name = string("p{i}"), val = tensor<int32, [4]>([0, 1, 3, 2])];')
        else:
            lines.append(f'        tensor<fp16, [1, 768, 1, 64]> v{i} = mul(x = {prev}, y = {c})[name = string("v{i}")];')
            prev = f"v{i}"
    lines += [f"    }} -> ({prev});", "}", ""]
    return "\n".join(lines)


def test_parses_and_prints_10k_statements():
    """Scale check (speed is measured by benchmarks/bench_mil_parse.py, never asserted in a test)."""
    text = big_program(10000).encode()
    assert _native._mil_count_stmts(text) == 10000
    out = _native.mil_format(text)
    assert out.count("\n") == 10000 + 6
    assert _native.mil_format(out) == out
