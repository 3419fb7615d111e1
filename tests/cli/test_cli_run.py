"""``orion run``: only the weight files the program names are read; missing ones are
listed or filled with seeded random MILBlob data; outputs print as a table."""

from __future__ import annotations

import os

import numpy as np
import pytest

from orion.native.blob import list_blobs, write_blob_file
from orion.cli import main
from orion.cli.run import random_blob_file
from orion.cli.demo import demo_mil

DIM, SEQ = 16, 8


@pytest.fixture
def prog(tmp_path):
    """The demo program (RMSNorm + linear) with its weight file weights/demo.bin NOT written."""
    _, offsets = write_blob_file([np.ones((1, DIM, 1, 1), np.float16), np.zeros((4 * DIM, DIM, 1, 1), np.float16)])
    p = tmp_path / "prog.mil"
    p.write_text(demo_mil(DIM, SEQ, 4 * DIM).replace("OFFSET_W", str(offsets[1])))
    return p


def test_missing_weight_files_are_listed(prog, capsys):
    assert main(["run", str(prog), "--device", "sim"]) == 1
    err = capsys.readouterr().err
    assert "orion: error:" in err and os.path.join("weights", "demo.bin") in err and "--random-weights" in err


def test_random_weights_are_seeded_and_the_outputs_a_table(prog, capsys):
    outs = []
    for seed in (3, 3, 4):
        assert main(["run", str(prog), "--device", "sim", "--random-weights", "--seed", str(seed), "--repeat", "1",
                     "--out", str(prog.parent / f"o{len(outs)}.npz")]) == 0
        out = capsys.readouterr().out
        outs.append(np.load(prog.parent / f"o{len(outs)}.npz")["y"])
    header, row = out.splitlines()[2:4]
    assert header.split() == ["output", "shape", "dtype", "min", "max", "mean", "inf", "nan"]
    assert row.split()[:3] == ["y", f"1x{4 * DIM}x1x{SEQ}", "float16"] and row.split()[-2:] == ["0", "0"]
    assert "random weights (seed 4) for: @model_path/weights/demo.bin" in out
    np.testing.assert_array_equal(outs[0], outs[1])
    assert not np.array_equal(outs[0], outs[2])
    assert not (prog.parent / "weights").exists()        # filled in memory, nothing written


def test_random_blob_file_has_the_declared_dtypes_and_shapes():
    rng = np.random.default_rng(0)
    decls = {64: ("fp16", (1, 4, 1, 1)), 192: ("int8", (3, 5))}
    recs = list_blobs(random_blob_file("@model_path/w.bin", decls, rng))
    assert [(r.metadata_offset, r.dtype_name, r.size_in_bytes) for r in recs] == [(64, "Float16", 8), (192, "Int8", 15)]


def test_only_the_named_weight_files_are_read(prog, capsys):
    w = prog.parent / "weights"
    w.mkdir()
    gamma = np.ones((1, DIM, 1, 1), np.float16)
    lin = np.eye(4 * DIM, DIM, dtype=np.float16).reshape(4 * DIM, DIM, 1, 1)
    (w / "demo.bin").write_bytes(write_blob_file([gamma, lin])[0])
    os.symlink(prog.parent / "nowhere", w / "stray.bin")          # reading it would fail
    (prog.parent / "deep").mkdir()
    (prog.parent / "deep" / "other.bin").write_bytes(b"not a blob")
    x = np.ones((1, DIM, 1, SEQ), np.float16)
    np.save(prog.parent / "x.npy", x)
    assert main(["run", str(prog), "--device", "sim", "--input", f"x={prog.parent / 'x.npy'}", "--repeat", "1",
                 "--out", str(prog.parent / "o.npz")]) == 0
    y = np.load(prog.parent / "o.npz")["y"]
    np.testing.assert_allclose(y[0, :DIM, 0, :], 1.0, rtol=2e-3)   # RMSNorm(ones) = ones, W = identity rows
    assert "random weights" not in capsys.readouterr().out
