"""Host weights read from the weight cache are views of its memory-mapped file (:mod:`orion.native.safetensors`).
Once the programs hold a weight - baked into a compiled program, or copied into a shared layer's surfaces -
its pages need not stay resident: :func:`release` hands them back to the OS (they stay in the page cache
and are read again on the next touch: a new program set, an embedding row), so the process holds each
weight once, where the programs read it. :func:`resident_bytes` is what such a view costs right now."""

from __future__ import annotations

import mmap
from typing import Iterable

import numpy as np

from ..quant import QuantizedArray
from ..quant.store import tensor_arrays

__all__ = ["backing_arrays", "file_maps", "map_of", "release", "release_maps", "resident_bytes"]

_PAGE = mmap.PAGESIZE


def map_of(a) -> mmap.mmap | None:
    """The read-only file mapping an array is a view of (through its bases), or None."""
    b = a
    for _ in range(16):
        if isinstance(b, mmap.mmap):
            return b
        if isinstance(b, memoryview):
            b = b.obj
        elif isinstance(b, np.ndarray):
            b = b.base
        else:
            return None
    return None


def backing_arrays(a) -> list:
    """The numpy arrays holding a weight's bytes: the array itself, or a compressed weight's operands (memory-mapped
    from the compressed-weight cache by :func:`orion.models.quantize.quantize_model`)."""
    return tensor_arrays(a.quant) if isinstance(a, QuantizedArray) else [a] if isinstance(a, np.ndarray) else []


def file_maps(arrays: Iterable) -> list[mmap.mmap]:
    """The distinct file mappings among the bases of ``arrays`` (:func:`backing_arrays` of each)."""
    out: dict[int, mmap.mmap] = {}
    for a in arrays:
        for p in backing_arrays(a):
            m = map_of(p)
            if m is not None and not m.closed:
                out[id(m)] = m
    return list(out.values())


def release(arrays: Iterable) -> int:
    """Drops the resident pages of every file mapping the arrays view (MADV_DONTNEED: clean file pages, read
    back on the next touch). Returns the bytes of the mappings released; 0 where the OS has no madvise."""
    return release_maps(file_maps(arrays))


def release_maps(maps: Iterable[mmap.mmap]) -> int:
    """:func:`release` for mappings found before (:func:`file_maps`)."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    done = 0
    for m in maps:
        if m.closed:
            continue
        try:
            m.madvise(mmap.MADV_DONTNEED)
            done += len(m)
        except (OSError, ValueError):      # a platform that refuses it: the pages simply stay
            pass
    return done


def resident_bytes(m: mmap.mmap) -> int | None:
    """Bytes of the mapping resident in this process now (its areas' Rss in /proc/self/smaps: the page
    cache may hold more); None where that cannot be read (not Linux)."""
    if len(m) == 0:
        return 0
    addr = np.frombuffer(m, np.uint8).__array_interface__["data"][0]
    lo, hi, total, inside = addr - addr % _PAGE, addr + len(m), 0, False
    try:
        with open("/proc/self/smaps", encoding="ascii", errors="replace") as f:
            for line in f:
                head = line.split(None, 1)[0]
                if "-" in head and not head.endswith(":"):          # an area: "start-end perms ..."
                    a, b = (int(x, 16) for x in head.split("-"))
                    inside = a < hi and b > lo
                elif inside and head == "Rss:":
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return total
