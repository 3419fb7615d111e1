"""The result of lowering a graph: MIL text + weight files + the I/O plan. What :func:`orion.compiler.lower`
returns, what the runtime receives, and what a saved program is read back as (:func:`orion.compiler.program.load`);
a module of its own so the program layer needs nothing from the compiler."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.graph import Graph
from .passes.context import CompileOptions, IOPlan

__all__ = ["Lowered"]


@dataclass
class Lowered:
    """A compiled-to-text program: what the runtime (and the ANE) receives, plus the I/O plan."""
    mil: str
    weights: dict[str, bytes]
    io: IOPlan
    options: CompileOptions
    graph: Graph                       # the graph after all passes (MIL names assigned)
    stats: dict = field(default_factory=dict)
    warnings: list = field(default_factory=list)

    def __repr__(self) -> str:
        kb = sum(len(b) for b in self.weights.values()) / 1024
        return (f"<Lowered {self.options.target}: {len(self.mil.splitlines())} MIL lines, {len(self.weights)} weight "
                f"file(s) {kb:.0f} KiB, inputs {list(self.io.inputs)}, outputs {list(self.io.outputs)}>")
