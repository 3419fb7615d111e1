"""Every Python block in README.md runs as written: the examples cannot rot."""

from __future__ import annotations

import os
import re

import pytest

README = os.path.join(os.path.dirname(__file__), "..", "README.md")


def _blocks() -> list[str]:
    with open(README, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_readme_has_python_examples():
    assert _blocks()


@pytest.mark.parametrize("i", range(len(_blocks())))
def test_readme_python_block_runs(i, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(_blocks()[i], f"README.md python block {i + 1}", "exec"), {"__name__": "__readme__"})
