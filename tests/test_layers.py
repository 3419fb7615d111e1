"""The layers of python/orion import downwards only, lazy (function-level) imports included; every exception
that exists today is listed below with why, so a NEW upward import fails here (remove a line when its
exception is fixed: the test also fails on a listed exception that no longer occurs).

Layers, lowest first (a module may import its own layer and those below it); the top level of python/orion
shows them: the loose modules are the base, each package below it one layer (two for models, two for apps):

    base      errors, fileio, _html, _version, run_folder (the run folder's latest.json layout), flags (flag
              value types and UsageError, for the CLI and the Python entry points that take its options)
    native    _native (the C++ extension) and native/, its wrappers: blob, mil, sim, safetensors, runtime,
              cost_table, weight_updates
    quant     compressed weights (numpy over base: the IR's compressed weights and constexpr ops use them)
    ir        the graph IR and its ops
    compiler  compiler/: passes/, codegen/, lowered, program, driver (compile, lower)
    models    models (loading, the model definition, generation), lora (adapters)
    train     training
    apps      cli (one module per command: doctor and demo included), bench, and the package's __init__ (which
              re-exports)

A function-level import itself is kept only for an optional dependency, start-up cost or an import circle, and
says which on its line (``# optional: ...``, ``# start-up: ...``, ``# circle: ...``); the rest import at the top.
"""

from __future__ import annotations

import ast
import os
import re
import textwrap

import orion

PKG = os.path.dirname(orion.__file__)
LAYERS = [
    ("base", {"errors", "fileio", "_html", "_version", "run_folder", "flags"}),
    ("native", {"_native", "native"}),
    ("quant", {"quant"}),
    ("ir", {"ir"}),
    ("compiler", {"compiler"}),
    ("models", {"models", "lora"}),
    ("train", {"train"}),
    ("apps", {"cli", "bench", "__init__"}),
]
LAYER_OF = {unit: i for i, (_, units) in enumerate(LAYERS) for unit in units}

# (importer, imported): the upward imports that exist today, each with the move that would remove it.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def _module_files() -> dict[str, str]:
    out = {}
    for root, _, files in os.walk(PKG):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(root, f)
                name = "orion." + os.path.relpath(path, PKG)[:-3].replace(os.sep, ".")
                out[name[:-9] if name.endswith(".__init__") else name] = path
    out["orion._native"] = "<extension>"
    return out


def _imports(name: str, path: str, modules: dict) -> set[str]:
    """The orion modules ``name`` imports anywhere in its file (module, class or function level)."""
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    found = set()
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:
                t = t.rsplit(".", 1)[0] if "." in t else ""
            if t.startswith("orion") and t != name:
                found.add(t)
    return found


def _unit(module: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _upward() -> set[tuple[str, str]]:
    modules = _module_files()
    out = set()
    for name, path in modules.items():
        if path == "<extension>":
            continue
        for target in _imports(name, path, modules):
            if LAYER_OF[_unit(target)] > LAYER_OF[_unit(name)]:
                out.add((name, target))
    return out


def test_every_module_has_a_layer():
    assert {_unit(m) for m in _module_files()} <= set(LAYER_OF)


def test_the_top_level_shows_the_layers():
    # a loose module at the top of python/orion is a base helper; every higher layer is a package (a directory
    # a newcomer sees in the listing), so a new module goes into its layer's package
    loose = {f[:-3] for f in os.listdir(PKG) if f.endswith(".py")}
    assert {m for m in loose if LAYER_OF.get(m) != 0} == {"__init__"}
    packages = {d for d in os.listdir(PKG) if os.path.isfile(os.path.join(PKG, d, "__init__.py"))}
    assert {u for _, units in LAYERS[1:] for u in units} - {"_native", "__init__"} <= packages


def test_no_new_upward_import():
    new = _upward() - set(KNOWN_UPWARD)
    assert not new, "upward imports (importer -> imported): " + ", ".join(f"{a} -> {b}" for a, b in sorted(new))


def test_every_listed_exception_still_exists():
    gone = set(KNOWN_UPWARD) - _upward()
    assert not gone, f"fixed - remove from KNOWN_UPWARD: {sorted(gone)}"


def test_the_scan_sees_lazy_imports(tmp_path):
    src = "def f():\n    from ..train import checkpoint\n    return checkpoint\n"
    path = tmp_path / "m.py"
    path.write_text(src)
    modules = _module_files()
    assert _imports("orion.models.m", str(path), modules) == {"orion.train.checkpoint"}


# Groups of modules that import each other in a circle today (lazy imports included), each with what would
# cut it; a new circle, or one of these growing, fails. (The IR's own circle - Value's operators calling the
# op builders, which build Values - was cut by graph.BUILDERS, the table the builders register into.)
KNOWN_CIRCLES: dict[frozenset[str], str] = {}


def _circles(graph: dict[str, set[str]] | None = None) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm over every import; ``graph``:
    importer -> imported, by default the package's)."""
    if graph is None:
        modules = _module_files()
        graph = {n: _imports(n, p, modules) for n, p in modules.items() if p != "<extension>"}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(frozenset(group))

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_circle_scan():
    # a lazy import back (b -> a inside a function) closes a circle as much as a top-level one
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"a"}}
    assert _circles(graph) == [frozenset({"a", "b"})]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_new_import_circle():
    new = [sorted(c) for c in _circles() if not any(c <= known for known in KNOWN_CIRCLES)]
    assert not new, f"modules importing each other in a circle: {new}"


def test_every_listed_circle_still_exists():
    # a circle that was cut (or shrank) leaves its line stale: update it, as for KNOWN_UPWARD
    current = set(_circles())
    stale = [sorted(c) for c in KNOWN_CIRCLES if c not in current]
    assert not stale, f"cut or changed - update KNOWN_CIRCLES: {stale}"


# A function-level import is for an optional dependency, start-up cost or an import circle only, and says which
# on its line: "# optional: ...", "# start-up: ..." or "# circle: ..."; anything else goes at the top.
LAZY_REASON = re.compile(r"#\s*(optional|start-up|circle):\s*\S")

# files whose function-level imports are not explained yet, each with why (remove a line once it is done: the
# test also fails on a listed file that no longer needs its exception)
LAZY_UNEXPLAINED: dict[str, str] = {}


def _unexplained_lazy_imports(path: str) -> list[str]:
    """``line: statement`` of each import inside a function of ``path`` without a reason comment on its lines."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    lines = src.splitlines()
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                if not any(LAZY_REASON.search(lines[i]) for i in range(child.lineno - 1, child.end_lineno)):
                    out.append(f"{child.lineno}: {ast.unparse(child)}")
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(src), False)
    return out


def _unexplained_by_file() -> dict[str, list[str]]:
    out = {}
    for path in _module_files().values():
        if path != "<extension>":
            found = _unexplained_lazy_imports(path)
            if found:
                out[os.path.relpath(path, PKG).replace(os.sep, "/")] = found
    return out


def test_every_function_level_import_says_why():
    bad = {f: found for f, found in _unexplained_by_file().items() if f not in LAZY_UNEXPLAINED}
    assert not bad, ("function-level imports without '# optional: / # start-up: / # circle: <why>' (move them to the "
                     "top of the module unless one applies): "
                     + "; ".join(f"{f}:{line}" for f, found in sorted(bad.items()) for line in found))


def test_every_listed_unexplained_file_still_needs_it():
    done = sorted(set(LAZY_UNEXPLAINED) - set(_unexplained_by_file()))
    assert not done, f"every function-level import explained - remove from LAZY_UNEXPLAINED: {done}"


def test_the_reason_scan(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(textwrap.dedent("""\
        import json


        def f():
            import numpy as np
            return np


        def g():
            import torch  # optional: not a dependency
            from huggingface_hub.errors import (  # start-up: only for a Hub name
                HFValidationError,
            )
            from . import ops  # circle: ops builds graphs


        class C:
            def h(self):
                def inner():
                    import jinja2  # heavy
                return inner
        """))
    assert _unexplained_lazy_imports(str(path)) == ["5: import numpy as np", "20: import jinja2"]


def test_public_native_modules_import_under_their_public_names():
    """``import orion.sim`` and ``from orion.mil import ...`` keep working although the files live in native/."""
    import importlib
    import orion.native

    for name in ("sim", "mil", "blob", "weight_updates"):
        mod = importlib.import_module(f"orion.{name}")
        assert mod is getattr(orion.native, name) is getattr(orion, name)
    from orion.sim import timing  # noqa: F401
