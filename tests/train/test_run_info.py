"""orion.train.run_info.Run: a run folder's checkpoints, configuration and last losses (from the JSONL log
when there is one, else state.json's history), its text and HTML reprs (escaped), typed errors."""

import json
import os

import numpy as np
import pytest

from orion.train import checkpoint as ckpt
from orion.train.errors import CheckpointError
from orion.train.run_info import Run


def _state(step, history):
    return {"model": {"model_type": "llama", "d_model": 64, "n_layers": 2, "n_heads": 4, "vocab_size": 256},
            "train": {"steps": 10, "lr": 3e-4, "batch": 1, "seq_len": 32}, "optimizer": {"t": step},
            "scaler": {"scale": 1.0, "good_steps": 0}, "data": {"epoch": 0, "cursor": 0}, "history": history}


def _run(folder, steps=(2, 4)):
    p = {"w": np.zeros((2, 2), np.float32)}
    hist = []
    for s in steps:
        hist = [5.0 - 0.1 * i for i in range(s)]
        ckpt.save(str(folder), s, p, {"m.w": p["w"]}, _state(s, hist), keep=5)
    return hist


def test_checkpoints_latest_and_losses_from_state(tmp_path):
    hist = _run(tmp_path / "run")
    r = Run(tmp_path / "run")
    assert r.step == 4 and [s for s, _ in r.checkpoints] == [2, 4]
    assert r.latest.endswith("step-00000004")
    assert r.losses() == [(1, 5.0), (2, 4.9), (3, hist[2]), (4, hist[3])]
    assert "step 4" in repr(r) and "last loss 4.7000" in repr(r)


def test_a_step_folder_is_a_run_too(tmp_path):
    _run(tmp_path / "run")
    r = Run(tmp_path / "run" / "step-00000002")
    assert r.step == 2 and r.folder == str(tmp_path / "run") and len(r.checkpoints) == 2


def test_the_jsonl_log_wins_and_torn_lines_are_skipped(tmp_path):
    _run(tmp_path / "run")
    with open(tmp_path / "run" / "train_log.jsonl", "w") as f:
        f.write(json.dumps({"step": 1, "loss": 3.5}) + "\n")
        f.write(json.dumps({"step": 2, "loss": 3.25, "val_loss": 3.3}) + "\n")
        f.write('{"step": 3, "lo')                                      # killed mid-write
    r = Run(tmp_path / "run")
    assert r.losses() == [(1, 3.5), (2, 3.25)]
    assert r.val_losses() == [(2, 3.3)]
    h = r._repr_html_()
    assert "3.5000 3.2500" in h and "3.3000 at step 2" in h and "d_model=64" in h


def test_html_escapes_the_folder_name(tmp_path):
    d = tmp_path / "<b>run</b>"
    _run(d)
    h = Run(d)._repr_html_()
    assert "<b>run</b>" not in h and "&lt;b&gt;run&lt;/b&gt;" in h


def test_not_a_run_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="not an orion train checkpoint"):
        Run(tmp_path)
    with pytest.raises(CheckpointError, match="no such file"):
        Run(os.path.join(tmp_path, "missing"))
