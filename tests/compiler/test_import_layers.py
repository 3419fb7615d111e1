"""The program layer (compiler/program.py, compiler/lowered.py) never imports the compiler's driver, and the
runtime (native/runtime.py) nothing of the compiler: orion.compile hands itself to the programs it makes for
recompiles."""

from __future__ import annotations

import ast
import os

import orion

PKG = os.path.dirname(orion.__file__)


def _imports(rel: str) -> set[str]:
    """The absolute names of the modules ``rel`` imports from, function-level (lazy) imports included."""
    package = ["orion"] + rel.split("/")[:-1]
    with open(os.path.join(PKG, rel), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            out.add(module)
            out.update(f"{module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_program_layer_does_not_import_the_compiler():
    for rel in ("compiler/program.py", "compiler/lowered.py"):
        assert not {m for m in _imports(rel) if m.startswith("orion.compiler.driver")}, rel
    assert not {m for m in _imports("native/runtime.py") if m.startswith("orion.compiler")}


def test_the_scan_resolves_relative_imports():
    assert "orion.compiler.passes.context" in _imports("compiler/program.py")
    assert "orion.errors" in _imports("native/runtime.py")
