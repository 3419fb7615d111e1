"""The version lives in one place and `orion --version` reports it with what the build contains."""

import contextlib
import io
import os
import platform
import re

import pytest

import orion
from orion import _native, cli

ROOT = os.path.join(os.path.dirname(__file__), "..")


def test_pyproject_takes_the_version_from_the_package():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        text = f.read()
    project = re.search(r"^\[project\]\n(.*?)^\[", text, re.S | re.M).group(1)
    assert not re.search(r"^version\s*=", project, re.M), "a static version in [project] would be a second place"
    assert re.search(r'^dynamic = \["version"\]', project, re.M)
    provider = re.search(r"^\[tool\.scikit-build\.metadata\.version\]\n(.*?)(^\[|\Z)", text, re.S | re.M).group(1)
    assert 'input = "python/orion/_version.py"' in provider
    with open(os.path.join(ROOT, "python", "orion", "_version.py")) as f:
        assert f'\n__version__ = "{orion.__version__}"\n' in f.read()


def test_build_info_names_the_compiled_kernels_and_backends():
    b = _native.build_info()
    assert b["isas"][0] == "scalar" and b["isa"] in b["isas"]
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert {"avx2", "avx512"} <= set(b["isas"]) and "neon" not in b["isas"]
    elif platform.machine().lower() in ("arm64", "aarch64"):
        assert "neon" in b["isas"] and "avx2" not in b["isas"]
    if platform.system() == "Darwin" and platform.machine() == "arm64":
        assert "ane" in b["backends"], "macOS arm64 builds compile the ANE backend in (CMake's ORION_ANE default)"
    assert b["backends"] == [d["name"] for d in _native.backends()] and "sim" in b["backends"]
    assert isinstance(b["stable_abi"], bool) and b["compiler"]


def test_orion_version_prints_version_kernels_and_backends():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as e:
        cli.main(["--version"])
    assert e.value.code in (0, None)
    lines = out.getvalue().splitlines()
    b = _native.build_info()
    assert lines[0].startswith(f"orion {orion.__version__} ({platform.system()} {platform.machine()}, ")
    assert lines[0].endswith(("abi3 build)" if b["stable_abi"] else "build)"))
    assert lines[1] == f"  kernels: {', '.join(b['isas'])} compiled in, {_native.kernel_isa()} in use"
    assert lines[2] == f"  backends: {', '.join(b['backends'])} compiled in"
