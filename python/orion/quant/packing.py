"""Sub-byte integers exactly as MILBlob v2 stores them: row-major, packed LSB-first, zero padding bits.

``uint4 [1, 2, 3]`` -> bytes ``21 03`` (4 padding bits), the layout coremltools'
``_BlobStorageWriter.write_uint4_data`` writes. A payload holds
``ceil(n * bits / 8)`` bytes. Signed sub-byte values (MIL ``int4``) are stored as two's complement in
``bits`` bits. :class:`PackedInts` is how ``orion.quant`` keeps every integer tensor of a constexpr op:
compressed in memory, in the bytes the blob stores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import QuantizationError

__all__ = ["UNSIGNED_BITS", "SIGNED_BITS", "BLOB_DTYPE_CODES", "pack_bits", "unpack_bits", "packed_size",
           "mil_int_dtype", "PackedInts"]

#: widths MILBlob stores for unsigned integers (uint1/2/3/4/6/8) and signed ones (int4, int8)
UNSIGNED_BITS = (1, 2, 3, 4, 6, 8)
SIGNED_BITS = (4, 8)

#: MIL dtype name -> MILBlob BlobDataType code (coremltools' ``BlobDataType``, append-only)
BLOB_DTYPE_CODES = {"uint8": 3, "int8": 4, "int4": 8, "uint1": 9, "uint2": 10, "uint4": 11, "uint3": 12,
                    "uint6": 13}


def mil_int_dtype(bits: int, signed: bool) -> str:
    """The MIL dtype name of a ``bits``-wide integer (``"uint4"``, ``"int8"``...); raises for widths MILBlob lacks."""
    allowed = SIGNED_BITS if signed else UNSIGNED_BITS
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or int(bits) not in allowed:
        kind = "signed" if signed else "unsigned"
        raise QuantizationError(f"{kind} integers are stored with bits in {list(allowed)} in MILBlob v2, "
                                f"got bits={bits!r}; choose one of those widths")
    return f"{'int' if signed else 'uint'}{int(bits)}"


def packed_size(count: int, bits: int) -> int:
    """Payload bytes of ``count`` ``bits``-wide values: ``ceil(count * bits / 8)``."""
    return (int(count) * int(bits) + 7) // 8


def _group(bits: int) -> tuple[int, int]:
    # g values fill exactly b bytes (3-bit: 8 values -> 3 bytes; 6-bit: 4 values -> 3 bytes)
    g = 8 // math.gcd(bits, 8)
    return g, g * bits // 8


def pack_bits(values, bits: int, signed: bool = False) -> np.ndarray:
    """Pack integer ``values`` (any shape, row-major) into the MILBlob payload: a 1-D uint8 array.

    Values must fit: ``[0, 2**bits)`` unsigned, ``[-2**(bits-1), 2**(bits-1))`` signed.
    """
    mil_int_dtype(bits, signed)
    v = np.asarray(values)
    if v.dtype.kind not in "iu":
        raise QuantizationError(f"pack_bits takes integer values, got dtype {v.dtype}; round and cast first")
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if v.size and (v.min() < lo or v.max() > hi):
        raise QuantizationError(f"values span [{v.min()}, {v.max()}], outside [{lo}, {hi}] of "
                                f"{mil_int_dtype(bits, signed)}; clip them before packing")
    flat = v.reshape(-1)
    n = flat.size
    if bits == 8:
        return flat.astype(np.int8 if signed else np.uint8).view(np.uint8).copy()
    g, b = _group(bits)
    # 1/2/4 bits fill one byte per group: stay in uint8; 3/6 bits need 24-bit words
    wide = np.uint8 if b == 1 else np.uint32
    words = np.zeros(-(-n // g) * g, wide)
    words[:n] = flat.astype(np.uint8, casting="unsafe") & np.uint8((1 << bits) - 1)  # two's complement
    words = words.reshape(-1, g)
    if b == 1:
        acc = words[:, 0].copy()
        for i in range(1, g):
            acc |= words[:, i] << np.uint8(i * bits)
        return acc[:packed_size(n, bits)]
    acc = np.zeros(words.shape[0], np.uint32)
    for i in range(g):
        acc |= words[:, i] << np.uint32(i * bits)
    out = np.empty((words.shape[0], b), np.uint8)
    for j in range(b):
        out[:, j] = (acc >> np.uint32(8 * j)) & 0xFF
    return out.reshape(-1)[:packed_size(n, bits)].copy()


def checked_payload(packed, bits: int, count: int, signed: bool = False) -> np.ndarray:
    """``packed`` as the 1-D uint8 payload of ``count`` ``bits``-wide values, or QuantizationError."""
    mil_int_dtype(bits, signed)
    p = np.asarray(packed)
    if p.dtype != np.uint8 or p.ndim != 1:
        raise QuantizationError(f"packed data must be a 1-D uint8 array, got {p.dtype} with shape {p.shape}")
    need = packed_size(count, bits)
    if p.size != need:
        raise QuantizationError(f"{count} {mil_int_dtype(bits, signed)} values take {need} bytes, "
                                f"got {p.size}; pass the payload of exactly this tensor")
    return p


def unpack_bits(packed, bits: int, count: int, signed: bool = False) -> np.ndarray:
    """Inverse of :func:`pack_bits`: the first ``count`` values as a 1-D int8 (signed) or uint8 array (8 bits: a
    read-only view of ``packed``)."""
    p = checked_payload(packed, bits, count, signed)
    if bits == 8:                    # the payload itself, read-only (a copy per decode cost a 1B model's load 1.2 s)
        out = p.view(np.int8 if signed else np.uint8)
        out.flags.writeable = False
        return out
    g, b = _group(bits)
    if b == 1:       # 1/2/4 bits: a group is one byte - stay in uint8 (the 32-bit words cost 3x a 4-bit load's unpack)
        vals = np.empty((p.size, g), np.uint8)
        for i in range(g):
            np.bitwise_and(p >> np.uint8(i * bits), np.uint8((1 << bits) - 1), out=vals[:, i])
        vals = vals.reshape(-1)[:count]
    else:            # 3/6 bits: 24-bit words
        buf = np.zeros(-(-p.size // b) * b, np.uint32)
        buf[:p.size] = p
        buf = buf.reshape(-1, b)
        acc = np.zeros(buf.shape[0], np.uint32)
        for j in range(b):
            acc |= buf[:, j] << np.uint32(8 * j)
        mask = np.uint32((1 << bits) - 1)
        vals = np.empty((buf.shape[0], g), np.uint8)
        for i in range(g):
            vals[:, i] = (acc >> np.uint32(i * bits)) & mask
        vals = vals.reshape(-1)[:count]
    if signed:  # sign-extend from `bits` bits
        return ((vals.astype(np.int16) ^ (1 << (bits - 1))) - (1 << (bits - 1))).astype(np.int8)
    return vals.copy()


@dataclass(frozen=True, eq=False)
class PackedInts:
    """An integer tensor kept as its MILBlob payload.

    ``payload`` is the 1-D uint8 array stored after the blob's metadata record, ``shape`` the MIL
    declaration, ``dtype`` the MIL dtype name (``"uint4"``, ``"int8"``...).
    """

    payload: np.ndarray
    shape: tuple
    bits: int
    signed: bool

    @classmethod
    def pack(cls, values, bits: int, signed: bool = False) -> "PackedInts":
        v = np.asarray(values)
        return cls(pack_bits(v, bits, signed), tuple(int(s) for s in v.shape), int(bits), bool(signed))

    @property
    def dtype(self) -> str:
        return mil_int_dtype(self.bits, self.signed)

    @property
    def blob_dtype_code(self) -> int:
        return BLOB_DTYPE_CODES[self.dtype]

    @property
    def nbytes(self) -> int:
        return int(self.payload.size)

    @property
    def padding_bits(self) -> int:
        """Unused bits of the last byte (the blob metadata's ``padding_size_in_bits``)."""
        return self.nbytes * 8 - math.prod(self.shape) * self.bits

    def unpack(self) -> np.ndarray:
        """The values, shaped, as int8 (signed) or uint8."""
        return unpack_bits(self.payload, self.bits, math.prod(self.shape), self.signed).reshape(self.shape)

    def reshaped(self, shape) -> "PackedInts":
        """The same payload under another shape of equal size (e.g. ``[out, in]`` -> ``[out, in, 1, 1]``)."""
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) != math.prod(self.shape):
            raise QuantizationError(f"cannot view {list(self.shape)} as {list(shape)}: sizes differ")
        return PackedInts(self.payload, shape, self.bits, self.signed)
