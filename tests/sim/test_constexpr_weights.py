"""The constexpr decompression ops read their operands from MILBlob files (sub-byte types included) and a
1x1 conv on their result equals, bit for bit, the same conv on the dense fp16 weight that
``QuantizedTensor.dequantize()`` gives (the op's exact arithmetic) — while the plan keeps it compressed."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from orion.native.blob import write_blob_file
from orion.compiler.codegen.constexpr import blob_items, statement
from orion.compiler.codegen.mil import Dialect
from orion.quant import palettize, quantize_blockwise, quantize_int8

PATH = "@model_path/weights/weight.bin"
HEAD = "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, %d, 1, %d]> x) {\n"


def _conv_tail(out: int, cin: int, s: int, w: str) -> str:
    return (f"        tensor<int32, [2]> st = const()[name = string(\"st\"), val = tensor<int32, [2]>([1, 1])];\n"
            f"        string pt = const()[name = string(\"pt\"), val = string(\"valid\")];\n"
            f"        tensor<fp16, [1, {out}, 1, {s}]> y = conv(pad_type = pt, strides = st, weight = {w}, x = x)"
            f"[name = string(\"y\")];\n    }} -> (y);\n}}\n")


def quantized_program(q, s: int = 16):
    """MIL + weights of ``y = conv(x, constexpr(q))`` (q: [out, in, 1, 1])."""
    items = blob_items(q)
    data, offs = write_blob_file([it for *_, it in items])
    out, cin = q.shape[0], q.shape[1]
    mil = HEAD % (cin, s) + statement(Dialect("ios18"), "w", q, [(PATH, o) for o in offs]) + _conv_tail(out, cin, s, "w")
    return mil, {PATH: data}


def dense_program(w16: np.ndarray, s: int = 16):
    data, offs = write_blob_file([w16])
    out, cin = w16.shape[0], w16.shape[1]
    shape = ", ".join(str(d) for d in w16.shape)
    const = (f"        tensor<fp16, [{shape}]> w = const()[name = string(\"w\"), val = tensor<fp16, [{shape}]>"
             f"(BLOBFILE(path = string(\"{PATH}\"), offset = uint64({offs[0]})))];\n")
    return HEAD % (cin, s) + const + _conv_tail(out, cin, s, "w"), {PATH: data}


def _weight(out, cin, seed=0):
    return (np.random.default_rng(seed).standard_normal((out, cin)) * 0.05).astype(np.float16)


SCHEMES = {
    "int8": lambda w: quantize_int8(w),
    "uint8": lambda w: quantize_int8(w, symmetric=False),
    "lut1": lambda w: palettize(w, 1, group_size=8),
    "lut2": lambda w: palettize(w, 2),
    "lut3": lambda w: palettize(w, 3, group_size=16),
    "lut4": lambda w: palettize(w, 4, group_size=16),
    "lut4_tensor": lambda w: palettize(w, 4),          # one table for every panel
    "lut4_rows": lambda w: palettize(w, 4, group_size=1),  # a table a row: the per-row lookups
    "lut6": lambda w: palettize(w, 6, group_size=48),
    "lut8": lambda w: palettize(w, 8),
    "int4": lambda w: quantize_blockwise(w, 4, block_size=8),
    "uint4": lambda w: quantize_blockwise(w, 4, block_size=8, symmetric=False),
    "int8_block": lambda w: quantize_blockwise(w, 8, block_size=40),
}


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("shape", [(48, 40), (37, 23)])   # 37 x 23: rows past a panel, odd sub-byte row starts
def test_conv_on_constexpr_weight_is_bit_equal_to_dense(scheme, shape):
    if scheme in ("lut1", "lut3", "lut4", "lut6") and shape[0] % {"lut1": 8, "lut3": 16, "lut4": 16, "lut6": 48}[scheme]:
        q = palettize(_weight(*shape), int(scheme[3:]))                 # per-tensor table
    elif scheme in ("int4", "uint4", "int8_block") and shape[1] % (40 if scheme == "int8_block" else 8):
        q = quantize_blockwise(_weight(*shape), 8 if scheme == "int8_block" else 4, block_size=shape[1],
                               symmetric=scheme != "uint4")
    else:
        q = SCHEMES[scheme](_weight(*shape))
    q = q.expand_rank(4)
    x = (np.random.default_rng(1).standard_normal((1, shape[1], 1, 16))).astype(np.float16)
    got = orion.compile_mil(*quantized_program(q), device="sim")(x=x)["y"]
    want = orion.compile_mil(*dense_program(q.dequantize()), device="sim")(x=x)["y"]
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_returned_constexpr_result_is_the_dequantized_weight():
    """A constexpr result read by another op than conv (here: returned through an identity-free add) is
    the dense fp16 tensor of QuantizedTensor.dequantize()."""
    q = palettize(_weight(16, 32), 4)
    data, offs = write_blob_file([it for *_, it in blob_items(q)])
    mil = ("program(1.3)\n{\n    func main<ios18>(tensor<fp16, [16, 32]> x) {\n"
           + statement(Dialect("ios18"), "w", q, [(PATH, o) for o in offs])
           + "        tensor<fp16, [16, 32]> y = add(x = x, y = w)[name = string(\"y\")];\n    } -> (y);\n}\n")
    y = orion.compile_mil(mil, {PATH: data}, device="sim")(x=np.zeros((16, 32), np.float16))["y"]
    assert np.array_equal(y.astype(np.float16), q.dequantize())


def test_plan_holds_compressed_bytes():
    """The plan's weight bytes for a 4-bit LUT weight are about a quarter of the fp16 weight's."""
    w = _weight(256, 512)
    q = palettize(w, 4, group_size=16).expand_rank(4)
    qp = orion.compile_mil(*quantized_program(q), device="sim")
    dp = orion.compile_mil(*dense_program(q.dequantize()), device="sim")
    assert dp.cost["weight_bytes"] >= w.nbytes                     # the dense fp16 weight (+ a few int consts)
    assert qp.cost["weight_bytes"] < 0.3 * w.nbytes


@pytest.mark.parametrize("bad, match", [
    (lambda mil: mil.replace("lut = tensor<fp16, [2, 1, 1, 1, 16, 1]>", "lut = tensor<fp16, [2, 1, 1, 1, 8, 2]>"),
     "vector palettization|lut must"),
    (lambda mil: mil.replace("indices = tensor<uint4,", "indices = tensor<int4,"), r"is UInt4 \(11\), expected Int4"),   # the blob record contradicts the declaration
])
def test_malformed_lut_is_a_compile_error(bad, match):
    q = palettize(_weight(32, 16), 4, group_size=16).expand_rank(4)
    mil, weights = quantized_program(q)
    with pytest.raises(orion.CompileError, match=match):
        orion.compile_mil(bad(mil), weights, device="sim")


def test_blockwise_scale_must_divide_the_data():
    q = quantize_blockwise(_weight(32, 16), 4, block_size=8).expand_rank(4)
    mil, weights = quantized_program(q)
    mil = mil.replace("scale = tensor<fp16, [32, 2, 1, 1]>", "scale = tensor<fp16, [32, 3, 1, 1]>")
    with pytest.raises(orion.CompileError):
        orion.compile_mil(mil, weights, device="sim")


@pytest.mark.parametrize("isa", ["scalar", "avx2", "avx512", "neon"])
@pytest.mark.parametrize("scheme", ["int8", "uint8", "int8_block", "lut4", "lut4_tensor", "lut4_rows"])
@pytest.mark.parametrize("shape", [(208, 80), (208, 77)])
def test_decode_width_constexpr_conv_is_bit_equal_on_every_isa(isa, scheme, shape):
    # the decode shape: 1-4 live columns, rows spanning several multi-panel tiles and a short last group, an
    # odd K (the AVX512-FP16 decoder and decode_lut4 take two k at a time), rows whose values decode to fp16
    # subnormals and large ones, so the 8-bit fused decoders (decode_ss8, in fp32 or in fp16 arithmetic), the
    # 4-bit LUT decoder (decode_lut4), the GEMVs that decode 8-bit codes and look 4-bit LUT codes up in registers
    # (AVX-512 and AVX2; a table per >= 16 rows: lut4, lut4_tensor) and the multi-panel GEMV run in every table
    from orion import _native
    if not _native.testing.force_isa(isa):
        pytest.skip(f"{isa} not available on this CPU")
    try:
        w = _weight(*shape, seed=3)
        w[:16] *= np.float16(1e-4)
        w[16:32] *= np.float16(2000)
        q = (quantize_blockwise(w, 8, block_size=shape[1]) if scheme == "int8_block" and shape[1] % 40 else
             SCHEMES[scheme](w)).expand_rank(4)
        x = (np.random.default_rng(2).standard_normal((1, shape[1], 1, 16))).astype(np.float16)
        got = orion.compile_mil(*quantized_program(q), device="sim")
        want = orion.compile_mil(*dense_program(q.dequantize()), device="sim")
        full = want(x=x)["y"]
        for live in (1, 2, 3, 4, 16):
            y = got.run({"x": x}, live_columns=live)["y"][..., :live]
            np.testing.assert_array_equal(y.view(np.uint16), full[..., :live].view(np.uint16))
    finally:
        _native.testing.force_isa("best")
