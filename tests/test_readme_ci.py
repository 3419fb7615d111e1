"""README.md shows exactly two set-up commands, and CI runs exactly README's test command."""

import os
import re

ROOT = os.path.join(os.path.dirname(__file__), "..")


def setup_commands():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    block = re.search(r"## Set up\s+```bash\n(.*?)```", text, re.S)
    assert block, "README.md needs a '## Set up' section with one bash block"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_has_exactly_two_setup_commands():
    cmds = setup_commands()
    assert len(cmds) == 2, cmds
    assert cmds[0].startswith("pip install .") and "pytest" in cmds[1]


def test_ci_runs_readmes_test_command():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    assert setup_commands()[1] in ci.splitlines()
