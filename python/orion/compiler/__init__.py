"""The graph compiler: a ``Graph`` (``orion.ir``) in, MIL text + weight files + a loaded program out.

``passes/`` (one module per pass; ``passes.pipeline`` is their order), ``codegen/`` (MIL text, MILBlob weight
files, constexpr ops), ``driver`` (``compile`` / ``lower`` / ``check``: passes then codegen then the runtime),
``lowered`` (what lowering returns: MIL, weights and the I/O plan) and ``program`` (``CompiledProgram``, the
loaded program that speaks the graph's names; ``load`` reads a saved one back).
"""

from .driver import check, compile, lower
from .lowered import Lowered
from .program import CompiledProgram, load

__all__ = ["CompiledProgram", "Lowered", "check", "compile", "load", "lower"]
