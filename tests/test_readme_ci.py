"""README.md's two set-up commands do what its text says, and CI runs exactly README's test command last.

README: the first command installs the package and trains a small model (``orion train``, no flags); the
second installs the package with its test extra and runs the whole suite, "also the last step of .ci/run"."""

import os
import re
import shlex
import sys

import pytest

from orion.cli import build_parser

ROOT = os.path.join(os.path.dirname(__file__), "..")


def _read(*path):
    with open(os.path.join(ROOT, *path)) as f:
        return f.read()


def setup_commands():
    block = re.search(r"## Set up\s+```bash\n(.*?)```", _read("README.md"), re.DOTALL)
    assert block, "README.md needs a '## Set up' section with one bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def steps(line):
    """A shell line of ``a && b`` as the argument vectors the shell runs."""
    return [shlex.split(part) for part in line.split("&&")]


def pyproject():
    toml = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")   # stdlib from 3.11
    return toml.loads(_read("pyproject.toml"))


def test_readme_has_exactly_two_setup_commands():
    assert len(setup_commands()) == 2, setup_commands()


def test_first_command_installs_the_package_and_trains():
    install, train = steps(setup_commands()[0])
    assert install == ["pip", "install", "."]                 # this repository, no extras
    assert train[0] in pyproject()["project"]["scripts"]    # a console script that install puts on PATH
    assert pyproject()["project"]["scripts"][train[0]] == "orion.cli:main"
    assert build_parser().parse_args(train[1:]).command == "train"    # and a subcommand it has, flags optional


def test_second_command_installs_the_test_extra_and_runs_the_whole_suite():
    install, run = steps(setup_commands()[1])
    assert install[:2] == ["pip", "install"] and len(install) == 3
    extra = re.fullmatch(r"\.\[(\w+)\]", install[2])
    assert extra, f"{install[2]!r}: expected this repository with one extra, .[name]"
    deps = pyproject()["project"]["optional-dependencies"][extra.group(1)]
    assert any(re.match(r"pytest\b", d) for d in deps), deps   # the extra brings the runner the next step uses
    assert run[:3] == ["python", "-m", "pytest"]
    assert all(a.startswith("-") for a in run[3:]), run     # no paths: pytest collects its testpaths...
    assert pyproject()["tool"]["pytest"]["ini_options"]["testpaths"] == ["tests"]   # ...the whole suite


def test_ci_runs_readmes_test_command_last():
    lines = [s for s in (line.strip() for line in _read(".ci", "run").splitlines()) if s and not s.startswith("#")]
    assert lines[-1] == setup_commands()[1], "the last command of .ci/run must be README's test command"
    assert "set -euo pipefail" in lines[:3]                   # an earlier failing step stops CI; the last sets the status
