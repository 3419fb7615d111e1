"""coremltools accepts our operands as its constexpr ops and writes them to its weight blob byte for byte.

The operands are handed to coremltools' MIL builder (its type inference validates the layout of each
op), the program is serialized with ``ct.convert(..., skip_model_load=True)``, and every operand's
``(MIL dtype, payload)`` from ``operands()`` must stand as one record of the package's ``weight.bin``.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest

from orion.quant import palettize, quantize_blockwise, quantize_int8
from orion.quant.packing import BLOB_DTYPE_CODES

from quant_helpers import coremltools_module, coremltools_weight_file

CODES = dict(BLOB_DTYPE_CODES, fp16=1)


def _records(data: bytes) -> list[tuple[int, bytes]]:
    out, off = [], 64
    while off < len(data):
        sentinel, code, size, payload_at = struct.unpack_from("<IIQQ", data, off)
        assert sentinel == 0xDEADBEEF
        out.append((code, data[payload_at:payload_at + size]))
        off = (payload_at + size + 63) // 64 * 64
    return out


def _convert(tmp_path, build, target_name):
    ct = coremltools_module("coremltools")
    mb = coremltools_module("coremltools.converters.mil").Builder
    types = coremltools_module("coremltools.converters.mil.mil").types

    def arr(p):  # unpacked values with coremltools' sub-byte numpy dtype (uint4, int4...)
        return p.unpack().astype(types.nptype_from_builtin(types.string_to_builtin(p.dtype)))

    target = getattr(ct.target, target_name)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 64), dtype=types.fp16)], opset_version=target)
    def prog(x):
        ys = [mb.linear(x=x, weight=w) for w in build(mb, arr)]
        y = ys[0]
        for other in ys[1:]:
            y = mb.add(x=y, y=other)
        return y

    return _records(coremltools_weight_file(tmp_path, prog, target))


def _assert_stored(records, q):
    for name, (dtype, _, payload) in q.operands().items():
        assert (CODES[dtype], payload.tobytes()) in records, f"{q.op}.{name} ({dtype}) not in coremltools' blob"


def _weight(seed):
    return (np.random.default_rng(seed).standard_normal((32, 64)) * 0.02).astype(np.float16)


@pytest.mark.parametrize("bits", [2, 3, 4, 6, 8])
def test_lut_operands_as_coremltools_writes_them(tmp_path, bits):
    q = palettize(_weight(bits), bits, group_size=8)
    records = _convert(tmp_path, lambda mb, arr: [mb.constexpr_lut_to_dense(indices=arr(q.indices), lut=q.lut)],
                       "iOS18")
    _assert_stored(records, q)


def test_blockwise_operands_as_coremltools_writes_them(tmp_path):
    qs = [quantize_blockwise(_weight(1), 4, block_size=16), quantize_blockwise(_weight(2), 4, block_size=16,
                                                                             symmetric=False),
          quantize_blockwise(_weight(3), 8, block_size=32, symmetric=False)]

    def build(mb, arr):
        return [mb.constexpr_blockwise_shift_scale(data=arr(q.data), scale=q.scale,
                                                   **({} if q.offset is None else {"offset": arr(q.offset)}))
                for q in qs]

    records = _convert(tmp_path, build, "iOS18")
    for q in qs:
        _assert_stored(records, q)


def test_ios16_operands_as_coremltools_writes_them(tmp_path):
    qs = [quantize_int8(_weight(4)), quantize_int8(_weight(5), symmetric=False)]
    lut = palettize(_weight(6), 4)
    o = lut.ios16_operands()

    def build(mb, arr):
        return [mb.constexpr_affine_dequantize(quantized_data=arr(q.quantized_data), zero_point=q.zero_point,
                                               scale=q.scale, axis=q.axis) for q in qs] + [
            mb.constexpr_lut_to_dense(indices=o["indices"][2], lut=o["lut"][2].view(np.float16),
                                      shape=o["shape"][2].view(np.uint32))]

    records = _convert(tmp_path, build, "iOS16")
    for q in qs:
        _assert_stored(records, q)
    for name in ("indices", "lut"):
        dtype, _, payload = o[name]
        assert (CODES[dtype], payload.tobytes()) in records, f"iOS16 lut {name} not in coremltools' blob"
