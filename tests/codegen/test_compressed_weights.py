"""Graph.weight(..., quant=...) is a first-class compressed weight: it survives the passes (linear's reshape
included), the codegen emits its constexpr op with every tensor operand in the weight blob file, the
program's output is bit-equal to the same graph on the dense fp16 weight the op produces, and the weight
file shrinks accordingly. Constexpr builder nodes write their tensor operands to the blob file too."""

from __future__ import annotations

import re

import numpy as np
import pytest

import orion
from orion.ir import Graph, GraphError, ops
from orion.quant import palettize, quantize_tensor

SCHEMES = ("int8", "uint8", "lut4", "lut6", "int4", "uint4")
OPS_OF = {"int8": "constexpr_affine_dequantize", "uint8": "constexpr_affine_dequantize",
          "lut4": "constexpr_lut_to_dense", "lut6": "constexpr_lut_to_dense",
          "int4": "constexpr_blockwise_shift_scale", "uint4": "constexpr_blockwise_shift_scale"}


def _w(out=96, cin=64, seed=0):
    return (np.random.default_rng(seed).standard_normal((out, cin)) * 0.05).astype(np.float32)


def _program(weight, **kw):
    g = Graph("q")
    x = g.input("x", (1, 64, 1, 16))
    g.output("y", ops.relu(ops.linear(x, g.weight("w", weight, **kw))))
    return orion.compile(g, device="sim")


@pytest.mark.parametrize("scheme", SCHEMES)
def test_compressed_weight_program_equals_dense_program(scheme):
    q = quantize_tensor(_w(), scheme)
    qp, dp = _program(q), _program(q.dequantize().astype(np.float32))
    assert re.search(rf"tensor<fp16, \[96, 64, 1, 1\]> w = {OPS_OF[scheme]}\(\)\[", qp.mil)
    assert "BLOBFILE" in qp.mil.split(f"{OPS_OF[scheme]}()")[1].split(";")[0]
    x = np.random.default_rng(1).standard_normal((1, 64, 1, 16)).astype(np.float32)
    assert np.array_equal(qp(x=x)["y"], dp(x=x)["y"])
    ratio = sum(map(len, qp.weights.values())) / sum(map(len, dp.weights.values()))
    bits = {"int8": 8, "uint8": 8, "lut4": 4, "lut6": 6, "int4": 4, "uint4": 4}[scheme]
    assert ratio < bits / 16 + 0.1                          # codes + tables / scales + 64-byte blob records


def test_scheme_name_quantizes_with_fitting_group_size():
    """quant='lut4' on 172 output channels (not a multiple of the default group 16): 43 rows per table."""
    p = _program(_w(172, 64), quant="lut4")
    assert "lut = tensor<fp16, [4, 1, 1, 1, 16, 1]>" in p.mil


def test_affine_builder_writes_its_data_to_the_blob_file():
    g = Graph("a")
    x = g.input("x", (1, 64, 1, 16))
    q = np.random.default_rng(2).integers(-127, 128, (32, 64, 1, 1)).astype(np.int8)
    w = ops.constexpr_affine_dequantize(g, q, np.full(32, 0.01, np.float16), np.zeros(32, np.int8), axis=0)
    g.output("y", ops.conv(x, w))
    p = orion.compile(g, device="sim")
    assert "quantized_data = tensor<int8, [32, 64, 1, 1]>(BLOBFILE(" in p.mil
    y = p(x=np.ones((1, 64, 1, 16), np.float32))["y"]
    w16 = (q.reshape(32, 64).astype(np.float32) * np.float32(np.float16(0.01))).astype(np.float16)
    want = w16.astype(np.float32).sum(1)                     # fp32 accumulation, one fp16 rounding
    np.testing.assert_array_equal(y[0, :, 0, 0], want.astype(np.float16).astype(np.float32))


def test_lut_builder_node_round_trips():
    q = palettize(_w(32, 64), 4, group_size=8).expand_rank(4)
    g = Graph("l")
    x = g.input("x", (1, 64, 1, 16))
    g.output("y", ops.relu(ops.conv(x, ops.constexpr_lut_to_dense(g, q.indices, q.lut))))
    p = orion.compile(g, device="sim")
    assert "indices = tensor<uint4, [32, 64, 1, 1]>(BLOBFILE(" in p.mil
    x = np.random.default_rng(3).standard_normal((1, 64, 1, 16)).astype(np.float32)
    assert np.array_equal(p(x=x)["y"], _program(q.dequantize()[:, :, 0, 0].astype(np.float32))(x=x)["y"])


def test_operands_count_as_weight_tensors():
    """Each BLOBFILE operand is a weight tensor for C18: 6 int8 weights (3 operands each: 18, + an I/O padding const) overflow 16."""
    g = Graph("many")
    x = g.input("x", (1, 64, 1, 16))
    y = x
    for i in range(6):
        y = ops.linear(y, g.weight(f"w{i}", _w(64, 64, i), quant="int8"))
    g.output("y", y)
    with pytest.raises(orion.CompileError, match=r"program has 1[89] weight tensors"):
        orion.compile(g, device="sim")


@pytest.mark.parametrize("kw, match", [
    ({"quant": "lut4", "dynamic": True}, "cannot be dynamic"),
    ({"quant": "lut5"}, "unknown quantization scheme"),
    ({"quant": 4}, "QuantizedTensor or a scheme name"),
    ({"quant": "int8", "shape": (64, 96)}, "can only gain trailing unit dims"),
])
def test_bad_compressed_weights_are_graph_errors(kw, match):
    with pytest.raises(GraphError, match=match):
        Graph("bad").weight("w", _w(), **kw)


@pytest.mark.parametrize("scheme", ["int8", "uint8", "lut4", "int4", "uint4"])
def test_transposed_compressed_weight_stays_compressed(scheme):
    """``linear(x, transpose(W))`` (a backward program's Wᵀ): the folded transpose keeps the constexpr op
    (codes repacked, tables / scales along their new axes) and equals the dense program bit for bit."""
    q = quantize_tensor(_w(64, 96), scheme)                    # [64, 96]: Wᵀ is [96, 64]
    progs = []
    for weight in (q, q.dequantize().astype(np.float32)):
        g = Graph("t")
        x = g.input("x", (1, 64, 1, 16))
        g.output("y", ops.linear(x, ops.transpose(g.weight("w", weight), (1, 0))))
        progs.append(orion.compile(g, device="sim"))
    assert OPS_OF[scheme] in progs[0].mil and OPS_OF[scheme] not in progs[1].mil
    x = np.random.default_rng(4).standard_normal((1, 64, 1, 16)).astype(np.float32)
    assert np.array_equal(progs[0](x=x)["y"], progs[1](x=x)["y"])
