"""One small MIL program per simulator op (ios18 dialect, every tensor 4-D with S >= 16), for running
every op on the ANE backend and comparing it with the simulator. ``OPS[name]() -> (mil, weights,
inputs)``, derived from the op schema (``orion.sim.ops()``): binary, unary and reduction programs are
generated from the output rule and parameters of each row; the other ops have a written program below.
Every schema op gets one (ops the simulator marks "rejected" must fail at compile instead)."""

from __future__ import annotations

import numpy as np

from orion.native.blob import write_blob_file

HEADER = ('program(1.3)\n[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
          '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
          '{"coremltools-version", "9.0"}})]\n{\n')
X = (1, 64, 1, 64)


def t(dtype, shape):
    return f"tensor<{dtype}, [{', '.join(str(int(d)) for d in shape)}]>"


def program(params: dict, body: list[str], returns: list[str]) -> str:
    ps = ", ".join(f"{t(d, s)} {n}" for n, (d, s) in params.items())
    lines = "\n".join("        " + b for b in body)
    return HEADER + f"    func main<ios18>({ps}) {{\n{lines}\n    }} -> ({', '.join(returns)});\n}}\n"


def stmt(out, dtype, shape, op, /, **args):
    a = ", ".join(f"{k} = {v}" for k, v in sorted(args.items()))
    return f'{t(dtype, shape)} {out} = {op}({a})[name = string("{out}")];'


def scalar(name, value, dtype):
    if dtype == "bool":
        v = f"bool({'true' if value else 'false'})"
    elif dtype == "string":
        v = f'string("{value}")'
    elif dtype in ("fp16", "fp32"):
        v = f"{dtype}({float(value)!r})"
    else:
        v = f"{dtype}({int(value)})"
    return f'{dtype} {name} = const()[name = string("{name}"), val = {v}];'


def tensor(name, values, dtype):
    a = np.asarray(values)
    if dtype == "bool":
        items = ", ".join("true" if v else "false" for v in a.ravel())
    elif dtype in ("fp16", "fp32"):
        items = ", ".join(repr(float(v)) for v in a.ravel())
    else:
        items = ", ".join(str(int(v)) for v in a.ravel())
    return f'{t(dtype, a.shape)} {name} = const()[name = string("{name}"), val = {t(dtype, a.shape)}([{items}])];'


def rnd(shape, seed=0, lo=None, hi=None, scale=1.0, dtype=np.float16):
    g = np.random.default_rng(seed)
    v = g.uniform(lo, hi, shape) if lo is not None else g.standard_normal(shape) * scale
    return v.astype(dtype)


def blob(a) -> bytes:
    data, offsets = write_blob_file([np.ascontiguousarray(a)])
    assert offsets == [64]
    return data


def _binary(op, lo=None, hi=None):
    def build():
        x = rnd(X, 1, lo, hi)
        y = rnd(X, 2, lo, hi)
        return program({"x": ("fp16", X), "y": ("fp16", X)}, [stmt("z", "fp16", X, op, x="x", y="y")], ["z"]), {}, \
            {"x": x, "y": y}
    return build


def _unary(op, lo=None, hi=None, scale=1.0):
    def build():
        return program({"x": ("fp16", X)}, [stmt("y", "fp16", X, op, x="x")], ["y"]), {}, \
            {"x": rnd(X, 3, lo, hi, scale)}
    return build


def _reduce(op):
    def build():
        body = [tensor("ax", [1], "int32"), scalar("kd", True, "bool"),
                stmt("y", "fp16", (1, 1, 1, 64), op, x="x", axes="ax", keep_dims="kd")]
        lo, hi = (0.9, 1.1) if op == "reduce_prod" else (None, None)
        return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 4, lo, hi)}
    return build


def _conv_body(weight="w"):
    return [scalar("pt", "valid", "string"), tensor("st", [1, 1], "int32"), tensor("pd", [0, 0, 0, 0], "int32"),
            tensor("dl", [1, 1], "int32"), scalar("gr", 1, "int32"),
            stmt("y", "fp16", X, "conv", dilations="dl", groups="gr", pad="pd", pad_type="pt", strides="st",
                 weight=weight, x="x")]


def conv():
    w = rnd((64, 64, 1, 1), 5, scale=0.125)
    wt = t("fp16", w.shape)
    body = [f'{wt} w = const()[name = string("w"), val = {wt}(BLOBFILE(path = string("@model_path/weights/w.bin"), '
            'offset = uint64(64)))];'] + _conv_body()
    return program({"x": ("fp16", X)}, body, ["y"]), {"@model_path/weights/w.bin": blob(w)}, {"x": rnd(X, 6)}


def constexpr_affine_dequantize():
    wq = np.random.default_rng(7).integers(-128, 128, (64, 64, 1, 1)).astype(np.int8)
    scale = [round(float(v), 4) for v in np.random.default_rng(8).uniform(0.001, 0.004, 64)]
    body = ['tensor<fp16, [64, 64, 1, 1]> w = constexpr_affine_dequantize()[axis = int32(0), name = string("w"), '
            'quantized_data = tensor<int8, [64, 64, 1, 1]>(BLOBFILE(path = string("@model_path/weights/q.bin"), '
            f'offset = uint64(64))), scale = {t("fp16", [64])}([{", ".join(map(repr, scale))}]), '
            'zero_point = int8(1)];'] + _conv_body()
    return program({"x": ("fp16", X)}, body, ["y"]), {"@model_path/weights/q.bin": blob(wq)}, {"x": rnd(X, 9)}


def _compressed(q):
    """A 1x1 conv on a compressed weight ``q`` [64, 64, 1, 1], its operands in one blob file (as orion emits it)."""
    from orion.compiler.codegen.constexpr import blob_items, statement
    from orion.compiler.codegen.mil import Dialect
    data, offs = write_blob_file([item for *_, item in blob_items(q)])
    path = "@model_path/weights/weight.bin"
    body = [statement(Dialect("ios18"), "w", q, [(path, o) for o in offs]).strip()] + _conv_body()
    return program({"x": ("fp16", X)}, body, ["y"]), {path: data}, {"x": rnd(X, 9)}


def constexpr_lut_to_dense():
    from orion.quant import palettize
    return _compressed(palettize(rnd((64, 64), 12, scale=0.125), 4, group_size=16).expand_rank(4))


def constexpr_blockwise_shift_scale():
    from orion.quant import quantize_blockwise
    return _compressed(quantize_blockwise(rnd((64, 64), 13, scale=0.125), 4, block_size=32).expand_rank(4))


def matmul():
    s = (1, 1, 64, 64)
    body = [scalar("tx", False, "bool"), scalar("ty", True, "bool"),
            stmt("z", "fp16", s, "matmul", x="x", y="y", transpose_x="tx", transpose_y="ty")]
    return program({"x": ("fp16", s), "y": ("fp16", s)}, body, ["z"]), {}, \
        {"x": rnd(s, 10, scale=0.25), "y": rnd(s, 11, scale=0.25)}


def scaled_dot_product_attention():
    s = (1, 2, 64, 32)
    body = [stmt("o", "fp16", s, "scaled_dot_product_attention", query="q", key="k", value="v")]
    return program({"q": ("fp16", s), "k": ("fp16", s), "v": ("fp16", s)}, body, ["o"]), {}, \
        {"q": rnd(s, 12), "k": rnd(s, 13), "v": rnd(s, 14)}


def pow_():
    body = [scalar("e", -0.5, "fp16"), stmt("y", "fp16", X, "pow", x="x", y="e")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 15, 0.5, 4.0)}


def log():
    body = [scalar("eps", 1e-4, "fp16"), stmt("y", "fp16", X, "log", x="x", epsilon="eps")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 16, 0.1, 8.0)}


def clip():
    body = [scalar("lo", -0.5, "fp16"), scalar("hi", 0.75, "fp16"), stmt("y", "fp16", X, "clip", x="x", alpha="lo", beta="hi")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 17)}


def softmax():
    body = [scalar("ax", -1, "int32"), stmt("y", "fp16", X, "softmax", x="x", axis="ax")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 18, scale=3)}


def layer_norm():
    g = rnd((64,), 19, 0.5, 1.5)
    b = rnd((64,), 20, scale=0.1)
    body = [tensor("ax", [1], "int32"), scalar("eps", 1e-3, "fp16"), tensor("g", g, "fp16"), tensor("b", b, "fp16"),
            stmt("y", "fp16", X, "layer_norm", x="x", axes="ax", gamma="g", beta="b", epsilon="eps")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 21, scale=2)}


def reshape():
    body = [tensor("s", [1, 32, 2, 64], "int32"), stmt("y", "fp16", (1, 32, 2, 64), "reshape", x="x", shape="s")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 22)}


def transpose():
    body = [tensor("p", [0, 3, 2, 1], "int32"), stmt("y", "fp16", X, "transpose", x="x", perm="p")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 23)}


def cast():
    body = [scalar("to16", "fp16", "string"), stmt("h", "fp16", X, "cast", x="x", dtype="to16"),
            stmt("r", "fp16", X, "relu", x="h"), scalar("to32", "fp32", "string"),
            stmt("y", "fp32", X, "cast", x="r", dtype="to32")]
    return program({"x": ("fp32", X)}, body, ["y"]), {}, {"x": rnd(X, 24, dtype=np.float32)}


def slice_by_index():
    body = [tensor("b", [0, 0, 0, 16], "int32"), tensor("e", [1, 64, 1, 48], "int32"),
            stmt("y", "fp16", (1, 64, 1, 32), "slice_by_index", x="x", begin="b", end="e")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 25)}


def slice_by_size():
    body = [tensor("b", [0, 8, 0, 0], "int32"), tensor("s", [1, 32, 1, 64], "int32"),
            stmt("y", "fp16", (1, 32, 1, 64), "slice_by_size", x="x", begin="b", size="s")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 26)}


def split():
    body = [scalar("ax", 1, "int32"), scalar("n", 1, "int32"), stmt("y", "fp16", X, "split", x="x", axis="ax", num_splits="n")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 27)}


def identity():
    return program({"x": ("fp16", X)}, [stmt("y", "fp16", X, "identity", x="x")], ["y"]), {}, {"x": rnd(X, 28)}


def gather():
    body = [tensor("ind", [0, 5, 9, 63, 2, 2, 40, 1], "int32"), scalar("ax", 1, "int32"),
            stmt("y", "fp16", (1, 8, 1, 64), "gather", x="x", indices="ind", axis="ax")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 29)}


def select():
    cond = (np.arange(64) % 3 == 0).reshape(1, 1, 1, 64)
    body = [tensor("c", cond, "bool"), stmt("z", "fp16", X, "select", cond="c", a="x", b="y")]
    return program({"x": ("fp16", X), "y": ("fp16", X)}, body, ["z"]), {}, {"x": rnd(X, 30), "y": rnd(X, 31)}


def band_part():
    s = (1, 1, 64, 64)
    body = [scalar("lo", 0, "int32"), scalar("up", -1, "int32"), stmt("y", "fp16", s, "band_part", x="x", lower="lo", upper="up")]
    return program({"x": ("fp16", s)}, body, ["y"]), {}, {"x": rnd(s, 32)}


def concat():
    """The full form (named axis and interleave consts), the only one that compiles (C01; strict rejects all)."""
    body = [scalar("ax", 1, "int32"), scalar("il", False, "bool"),
            stmt("y", "fp16", (1, 128, 1, 64), "concat", values="(x, z)", axis="ax", interleave="il")]
    return program({"x": ("fp16", X), "z": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 34), "z": rnd(X, 35)}


def quantize_dequantize():
    body = [scalar("s", 0.03125, "fp16"), scalar("zp", 3, "int8"), scalar("od", "int8", "string"),
            stmt("q", "int8", X, "quantize", input="x", scale="s", zero_point="zp", output_dtype="od"),
            stmt("y", "fp16", X, "dequantize", input="q", scale="s", zero_point="zp")]
    return program({"x": ("fp16", X)}, body, ["y"]), {}, {"x": rnd(X, 33, scale=2)}


# input domain (lo, hi) or scale per generated op, where the default standard normal does not fit
_DOMAIN = {"real_div": {"lo": 0.5, "hi": 2.0}, "sqrt": {"lo": 0.0, "hi": 9.0}, "rsqrt": {"lo": 0.5, "hi": 4.0},
           "exp": {"scale": 2.0}, "tanh": {"scale": 2.0}, "sigmoid": {"scale": 3.0}, "silu": {"scale": 3.0}}
_WRITTEN = {
    "conv": conv, "constexpr_affine_dequantize": constexpr_affine_dequantize, "matmul": matmul,
    "constexpr_lut_to_dense": constexpr_lut_to_dense,
    "constexpr_blockwise_shift_scale": constexpr_blockwise_shift_scale,
    "scaled_dot_product_attention": scaled_dot_product_attention, "pow": pow_, "log": log, "clip": clip,
    "softmax": softmax, "layer_norm": layer_norm, "reshape": reshape, "transpose": transpose, "cast": cast,
    "slice_by_index": slice_by_index, "slice_by_size": slice_by_size, "split": split, "identity": identity,
    "gather": gather, "select": select, "band_part": band_part, "concat": concat,
    "quantize": quantize_dequantize, "dequantize": quantize_dequantize,
    "const": identity,  # every program uses const; identity is the smallest one that runs
}


def _generated(row):
    required = [p for p in row["params"] if not p.endswith("?")]
    dom = _DOMAIN.get(row["name"], {})
    if row["output"] == "broadcast(x, y)":
        return _binary(row["name"], dom.get("lo"), dom.get("hi"))
    if row["output"] == "elementwise(x)" and required == ["x"]:
        return _unary(row["name"], dom.get("lo"), dom.get("hi"), dom.get("scale", 1.0))
    if row["output"].startswith("reduce("):
        return _reduce(row["name"])
    return None


def _derive() -> dict:
    import orion

    out = {}
    for row in orion.sim.ops():
        build = _WRITTEN.get(row["name"]) or _generated(row)
        if build is None:
            raise KeyError(f"tests/ane/op_programs.py: no program for the schema op {row['name']!r}; "
                           f"add one to _WRITTEN")
        out[row["name"]] = build
    return out


OPS = _derive()
