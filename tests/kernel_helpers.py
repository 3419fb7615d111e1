"""Running a native kernel under every kernel table this CPU has and several pool sizes: results must not depend
on the ISA or the thread count."""

from __future__ import annotations

from orion import _native

ALL_ISAS = ("scalar", "avx2", "avx512", "neon")


def available_isas() -> list[str]:
    """The kernel tables this CPU can run (the best one is restored)."""
    isas = [i for i in ALL_ISAS if _native.testing.force_isa(i)]
    _native.testing.force_isa("best")
    return isas


def each_isa_and_threads(threads=(1, 2)):
    """Yields (isa, n) with the kernel table forced to each available ISA and the pool to n threads; the best table
    and the default pool are restored afterwards, however the loop ends."""
    try:
        for isa in available_isas():
            assert _native.testing.force_isa(isa)
            for n in threads:
                _native.set_num_threads(n)
                yield isa, n
    finally:
        _native.testing.force_isa("best")
        _native.set_num_threads(0)
