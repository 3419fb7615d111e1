"""The layering of src/orion_native/: which folders each folder may include from. runtime/ is the backend
interface and must not know any backend (sim/, ane/); cpu/ is the CPU math every layer uses and depends on
common/ only. A new include across a layer fails here, naming the file and line."""

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "orion_native"
# folder -> the folders its files may include from (bindings/ is the composition root: anything).
ALLOWED = {
    "common": {"common"},
    "cpu": {"common", "cpu"},
    "mil": {"common", "mil"},
    "blob": {"common", "blob"},
    "runtime": {"common", "cpu", "runtime"},
    "sim": {"common", "cpu", "mil", "blob", "runtime", "sim"},
    "ane": {"common", "runtime", "sim", "ane"},
}
_INCLUDE = re.compile(r'^\s*#\s*(?:include|import)\s+"([a-z_]+)/[^"]*"', re.MULTILINE)
_SUFFIXES = {".h", ".cpp", ".inc", ".m", ".mm"}


def crossings(folder: str) -> list[str]:
    """Every `#include "<other>/..."` in `folder` whose <other> is not allowed, as file:line: text."""
    bad = []
    for f in sorted((SRC / folder).rglob("*")):
        if f.suffix not in _SUFFIXES:
            continue
        text = f.read_text(encoding="utf-8")
        for m in _INCLUDE.finditer(text):
            if m.group(1) not in ALLOWED[folder]:
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{f.relative_to(SRC)}:{line}: {m.group(0).strip()}")
    return bad


def test_every_native_folder_has_a_rule():
    folders = {p.name for p in SRC.iterdir() if p.is_dir()} - {"bindings"}
    assert folders == set(ALLOWED), "a new folder under src/orion_native needs its row in ALLOWED"


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_folder_includes_only_its_lower_layers(folder):
    bad = crossings(folder)
    assert not bad, f"{folder}/ may include only {sorted(ALLOWED[folder])}:\n" + "\n".join(bad)


def test_runtime_includes_no_backend(tmp_path, monkeypatch):
    # The check itself sees a sim/ include in runtime/ (runtime/ includes nothing of sim/).
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "x.cpp").write_text('#include "runtime/backend.h"\n  #include "sim/plan.h"\n')
    monkeypatch.setitem(globals(), "SRC", tmp_path)
    assert crossings("runtime") == ['runtime/x.cpp:2: #include "sim/plan.h"']
