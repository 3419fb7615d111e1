"""The layers import downwards only: the program layer (program.py, lowered.py, runtime.py)
never imports the compiler; orion.compile hands itself to the programs it makes for recompiles."""

from __future__ import annotations

import ast
import os

import orion

PKG = os.path.dirname(orion.__file__)


def _imports(rel: str) -> set[str]:
    tree = ast.parse(open(os.path.join(PKG, rel), encoding="utf-8").read())
    out = set()
    for node in ast.walk(tree):                       # function-level (lazy) imports count too
        if isinstance(node, ast.ImportFrom) and node.level:
            out.add(node.module or "")
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_program_layer_does_not_import_the_compiler():
    for rel in ("program.py", "lowered.py", "runtime.py"):
        assert not {m for m in _imports(rel) if m == "compiler" or m.startswith("compiler.")}, rel
