"""Small hand-written MIL programs for the runtime tests (ios18 dialect)."""

from __future__ import annotations

import numpy as np

from orion.native.blob import write_blob_file

HEADER = ('program(1.3)\n[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
          '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
          '{"coremltools-version", "9.0"}})]\n{\n')


def t(dtype, shape):
    return f"tensor<{dtype}, [{', '.join(map(str, shape))}]>"


def add_program(shape=(1, 256, 1, 128), names=("a", "b"), out="z", dtype="fp16"):
    a, b = names
    return (HEADER + f"    func main<ios18>({t(dtype, shape)} {a}, {t(dtype, shape)} {b}) {{\n"
            f"        {t(dtype, shape)} {out} = add(x = {a}, y = {b})[name = string(\"{out}\")];\n"
            f"    }} -> ({out});\n}}\n")


def sub_program(first="x", second="lora_a", third="lora_b", shape=(1, 64, 1, 256)):
    """y = x - lora_a * lora_b with parameters declared in non-alphabetical order (C13)."""
    ts = t("fp16", shape)
    return (HEADER + f"    func main<ios18>({ts} {first}, {ts} {second}, {ts} {third}) {{\n"
            f"        {ts} p = mul(x = {second}, y = {third})[name = string(\"p\")];\n"
            f"        {ts} y = sub(x = {first}, y = p)[name = string(\"y\")];\n"
            f"    }} -> (y);\n}}\n")


def three_outputs(shape=(1, 64, 1, 256)):
    """Returns (q, k, v) = (x + 1, x * 2, x - 3) in non-alphabetical tuple order (C03)."""
    ts = t("fp16", shape)
    return (HEADER + f"    func main<ios18>({ts} x) {{\n"
            "        fp16 one = const()[name = string(\"one\"), val = fp16(1)];\n"
            "        fp16 two = const()[name = string(\"two\"), val = fp16(2)];\n"
            "        fp16 three = const()[name = string(\"three\"), val = fp16(3)];\n"
            f"        {ts} q = add(x = x, y = one)[name = string(\"q\")];\n"
            f"        {ts} k = mul(x = x, y = two)[name = string(\"k\")];\n"
            f"        {ts} v = sub(x = x, y = three)[name = string(\"v\")];\n"
            "    } -> (q, k, v);\n}\n")


def linear_program(cin=64, cout=128, s=256, path="@model_path/weights/w.bin", fp32_io=False):
    """y = W x as a 1x1 conv with a BLOBFILE weight [cout, cin, 1, 1]; fp32 I/O adds casts (M3+)."""
    io = "fp32" if fp32_io else "fp16"
    conv_out = "h" if fp32_io else "y"
    lines = [f"    func main<ios18>({t(io, (1, cin, 1, s))} x) {{"]
    src = "x"
    if fp32_io:
        lines += ['        string to16 = const()[name = string("to16"), val = string("fp16")];',
                  f'        {t("fp16", (1, cin, 1, s))} xh = cast(dtype = to16, x = x)[name = string("xh")];']
        src = "xh"
    wt = t("fp16", (cout, cin, 1, 1))
    lines += [
        '        string pt = const()[name = string("pt"), val = string("valid")];',
        '        tensor<int32, [2]> st = const()[name = string("st"), val = tensor<int32, [2]>([1, 1])];',
        '        tensor<int32, [4]> pd = const()[name = string("pd"), val = tensor<int32, [4]>([0, 0, 0, 0])];',
        '        tensor<int32, [2]> dl = const()[name = string("dl"), val = tensor<int32, [2]>([1, 1])];',
        '        int32 gr = const()[name = string("gr"), val = int32(1)];',
        f'        {wt} w = const()[name = string("w"), val = {wt}(BLOBFILE(path = string("{path}"), offset = uint64(64)))];',
        f'        {t("fp16", (1, cout, 1, s))} {conv_out} = conv(dilations = dl, groups = gr, pad = pd, pad_type = pt, '
        f'strides = st, weight = w, x = {src})[name = string("{conv_out}")];',
    ]
    if fp32_io:
        lines += ['        string to32 = const()[name = string("to32"), val = string("fp32")];',
                  f'        {t("fp32", (1, cout, 1, s))} y = cast(dtype = to32, x = h)[name = string("y")];']
    lines += ["    } -> (y);", "}"]
    return HEADER + "\n".join(lines) + "\n"


def dynamic_linear_program(cin=64, cout=64, s=256):
    """y = W x with W passed as an input [1, 1, cout, cin] (weights as program inputs)."""
    return (HEADER + f"    func main<ios18>({t('fp16', (1, 1, cout, cin))} w, {t('fp16', (1, 1, cin, s))} x) {{\n"
            "        bool f = const()[name = string(\"f\"), val = bool(false)];\n"
            f"        {t('fp16', (1, 1, cout, s))} y = matmul(transpose_x = f, transpose_y = f, x = w, y = x)"
            "[name = string(\"y\")];\n"
            "    } -> (y);\n}\n")


def weight_blob(w: np.ndarray) -> bytes:
    data, offsets = write_blob_file([np.ascontiguousarray(w, dtype=np.float16)])
    assert offsets == [64]
    return data


def rand(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float16)
