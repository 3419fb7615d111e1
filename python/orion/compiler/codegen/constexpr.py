"""A compressed weight (:class:`orion.quant.QuantizedTensor`) as MIL: its constexpr op with every operand a
``BLOBFILE`` tensor, parameters in the attribute list, as coremltools writes them.

``blob_items(q)`` gives the operands in the order they go into the weight file (name, MIL dtype, shape,
item for :func:`orion.blob.write_blob_file`); ``statement`` the op's text once their offsets are known.
"""

from __future__ import annotations

import math

import numpy as np

from ...quant.packing import PackedInts

__all__ = ["blob_items", "statement", "n_blobs"]

_NUMPY = {"fp16": np.float16, "int8": np.int8, "uint8": np.uint8}


def blob_items(q) -> list[tuple[str, str, tuple, object]]:
    """``[(param, MIL dtype, shape, blob item)]`` of ``q.operands()``, parameters sorted by name."""
    out = []
    for param, (dtype, shape, payload) in sorted(q.operands().items()):
        shape = tuple(int(s) for s in shape)
        if dtype in _NUMPY:
            item = np.ascontiguousarray(payload).view(_NUMPY[dtype]).reshape(shape)
        else:  # sub-byte: the packed payload with its dtype code and padding bits
            bits = int(dtype.rsplit("t", 1)[1])  # "uint4" -> 4, "int4" -> 4
            item = PackedInts(np.ascontiguousarray(payload), shape, bits, not dtype.startswith("u"))
        out.append((param, dtype, shape, item))
    return out


def n_blobs(q) -> int:
    """BLOBFILE tensors the op takes (each a weight tensor for C18)."""
    return len(q.operands())


def statement(d, name: str, q, refs: list[tuple[str, int]], out_shape=None) -> str:
    """``tensor<fp16, [..]> name = constexpr_...()[name = .., <param> = tensor<..>(BLOBFILE(..)), ..];``

    ``d`` is the codegen's Dialect, ``refs[i]`` the (path, offset) of ``blob_items(q)[i]``."""
    shape = tuple(q.shape) if out_shape is None else tuple(out_shape)
    if math.prod(shape) != math.prod(q.shape):
        raise ValueError(f"{name}: {q.op} of shape {list(q.shape)} cannot produce {list(shape)}")
    items = [("name", d.string(name))]
    if q.op == "constexpr_affine_dequantize":  # the one operand that is not a tensor
        items.append(("axis", d.scalar("int32", str(int(q.axis)))))
    for (param, dtype, pshape, _), (path, off) in zip(blob_items(q), refs):
        items.append((param, d.blobfile(dtype, pshape, path, off)))
    attrs = ", ".join(f"{k} = {t}" for k, t in sorted(items))
    return f"        {d.tensor_type('fp16', shape)} {name} = {q.op}()[{attrs}];\n"
