"""Damaged ``orion train`` run folders: ``checkpoint.load`` and ``orion train --resume`` end in a
CheckpointError naming the folder and the file, never a KeyError/TypeError from a half-read state."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from orion.cli import main
from orion.train import checkpoint as ck
from orion.train.errors import CheckpointError

FAST = ["--preset", "micro", "--batch", "2", "--no-progress", "--seq-len", "64", "--warmup", "2",
        "--sample-tokens", "0"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ck") / "run"
    assert main(["train", *FAST, "--steps", "1", "--ckpt-dir", str(folder)]) == 0
    return folder


def _step(folder):
    with open(folder / "latest.json") as f:
        return folder / json.load(f)["checkpoint"]


def _state(folder, change):
    p = _step(folder) / "state.json"
    p.write_text(json.dumps(change(json.loads(p.read_text()))))


def _flip_last_byte(p):
    b = p.read_bytes()
    p.write_bytes(b[:-1] + bytes([b[-1] ^ 1]))


CASES = [
    ("latest.json not JSON", lambda r: (r / "latest.json").write_text("{x"), "latest.json"),
    ("latest.json a list", lambda r: (r / "latest.json").write_text("[1]"), "latest.json"),
    ("latest.json leaves the folder", lambda r: (r / "latest.json").write_text('{"checkpoint": "../../etc"}'),
     "'../../etc'"),
    ("latest.json names a number", lambda r: (r / "latest.json").write_text('{"checkpoint": 5}'), "latest.json"),
    ("latest.json names a missing step", lambda r: (r / "latest.json").write_text('{"checkpoint": "step-00000099"}'),
     "step-00000099"),
    ("state.json not JSON", lambda r: (_step(r) / "state.json").write_text("{x"), "state.json"),
    ("state.json a list", lambda r: (_step(r) / "state.json").write_text("[1]"), "state.json"),
    ("state.json step a string", lambda r: _state(r, lambda s: dict(s, step="x")), "state.json"),
    ("state.json without model", lambda r: _state(r, lambda s: {k: v for k, v in s.items() if k != "model"}),
     "state.json"),
    ("weights truncated", lambda r: open(_step(r) / "model.safetensors", "r+b").truncate(100), "model.safetensors"),
    ("optimizer state bit flip", lambda r: _flip_last_byte(_step(r) / "optim.safetensors"), "optim.safetensors"),
    ("manifest removed", lambda r: os.remove(_step(r) / "manifest.json"), "manifest.json"),
]


@pytest.mark.parametrize("name,damage,needle", CASES, ids=[c[0] for c in CASES])
def test_damaged_run_folder(tmp_path, run, capsys, name, damage, needle):
    folder = tmp_path / "run"
    shutil.copytree(run, folder)
    damage(folder)
    with pytest.raises(CheckpointError) as e:
        ck.load(str(folder))
    assert needle in str(e.value) and str(folder) in str(e.value)
    capsys.readouterr()
    assert main(["train", *FAST, "--steps", "2", "--resume", str(folder)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("orion: error: ") and needle in err and "Traceback" not in err
