"""coremltools -> orion: the simulator reads the constexpr operands from the weight.bin coremltools writes
(sub-byte records included) and computes what coremltools' own decompression of the op computes.

(orion -> coremltools, the other direction, is tests/quant/test_coremltools_blobs.py: our operands are
coremltools' records byte for byte.)"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import orion
from orion.compiler.codegen.constexpr import blob_items, statement
from orion.compiler.codegen.mil import Dialect
from orion.quant import palettize, quantize_blockwise, quantize_int8

sys.path.insert(0, str(Path(__file__).parent.parent / "quant"))
from quant_helpers import coremltools_module, coremltools_weight_file  # noqa: E402

PATH = "@model_path/weights/weight.bin"


def _records(data: bytes) -> dict[bytes, int]:
    """payload bytes -> metadata offset of each record of a blob file."""
    out, off = {}, 64
    while off < len(data):
        sentinel, _, size, at = struct.unpack_from("<IIQQ", data, off)
        assert sentinel == 0xDEADBEEF
        out.setdefault(data[at:at + size], off)
        off = (at + size + 63) // 64 * 64
    return out


def _coremltools(tmp_path, q):
    """(weight.bin bytes, the op's dense value) of ``q`` built and serialized by coremltools."""
    ct = coremltools_module("coremltools")
    mb = coremltools_module("coremltools.converters.mil").Builder
    types = coremltools_module("coremltools.converters.mil.mil").types

    def arr(p):
        return p.unpack().astype(types.nptype_from_builtin(types.string_to_builtin(p.dtype)))

    def op():
        if q.op == "constexpr_lut_to_dense":
            return mb.constexpr_lut_to_dense(indices=arr(q.indices), lut=q.lut)
        if q.op == "constexpr_blockwise_shift_scale":
            return mb.constexpr_blockwise_shift_scale(data=arr(q.data), scale=q.scale,
                                                      **({} if q.offset is None else {"offset": arr(q.offset)}))
        return mb.constexpr_affine_dequantize(quantized_data=arr(q.quantized_data), zero_point=q.zero_point,
                                              scale=q.scale, axis=q.axis)

    target = ct.target.iOS18
    cin = q.shape[1]

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, cin), dtype=types.fp16)], opset_version=target)
    def prog(x):
        return mb.linear(x=x, weight=op())

    const = next(o for o in prog.functions["main"].operations if o.op_type.startswith("constexpr_"))
    dense = np.asarray(const.materialized_val_inference() if hasattr(const, "materialized_val_inference")
                       else const.value_inference())
    return coremltools_weight_file(tmp_path, prog, target), dense


def _weight(seed):
    return (np.random.default_rng(seed).standard_normal((48, 64)) * 0.03).astype(np.float16)


CASES = {
    "int8": lambda: quantize_int8(_weight(1)),
    "uint8": lambda: quantize_int8(_weight(2), symmetric=False),
    "lut2": lambda: palettize(_weight(3), 2, group_size=16),
    "lut3": lambda: palettize(_weight(4), 3, group_size=8),
    "lut4": lambda: palettize(_weight(5), 4, group_size=16),
    "lut6": lambda: palettize(_weight(6), 6),
    "int4": lambda: quantize_blockwise(_weight(7), 4, block_size=32),
    "uint4": lambda: quantize_blockwise(_weight(8), 4, block_size=16, symmetric=False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_simulator_decodes_coremltools_weight_file(tmp_path, case):
    q = CASES[case]()
    data, dense = _coremltools(tmp_path, q)
    offsets = _records(data)
    refs = [(PATH, offsets[item.payload.tobytes() if hasattr(item, "payload") else item.tobytes()])
            for *_, item in blob_items(q)]
    mil = ("program(1.3)\n{\n    func main<ios18>(tensor<fp16, [48, 64]> x) {\n"
           + statement(Dialect("ios18"), "w", q, refs)
           + "        tensor<fp16, [48, 64]> y = add(x = x, y = w)[name = string(\"y\")];\n    } -> (y);\n}\n")
    y = orion.compile_mil(mil, {PATH: data}, device="sim")(x=np.zeros((48, 64), np.float16))["y"]
    assert np.array_equal(y.astype(np.float16).view(np.uint16), dense.astype(np.float16).view(np.uint16))
    assert np.array_equal(y.astype(np.float16), q.dequantize())
