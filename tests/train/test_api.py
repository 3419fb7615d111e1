"""orion.train.run: `orion train` from Python (a notebook) - the same defaults table and code path as the
command line, so the same options give bit-identical weights; options are the flags' names; a bad one is a
UsageError before any work; on_step sees every step; without checkpoints it returns the weights."""

from __future__ import annotations

import os

import numpy as np
import pytest

import orion.train
from orion.cli.common import UsageError
from orion.cli.train import main
from orion.train import checkpoint as ck
from orion.train.defaults import DEFAULTS

FX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "qwen3")
OPTS = dict(steps=3, batch=2, seq_len=32, sample_tokens=0, lora="r=4,alpha=8")


def test_the_python_run_equals_the_cli_run_bit_for_bit(tmp_path):
    assert main(["--model", FX, "--steps", "3", "--batch", "2", "--seq-len", "32", "--sample-tokens", "0",
                 "--lora", "r=4,alpha=8", "--no-progress", "--ckpt-dir", str(tmp_path / "cli")]) == 0
    seen = []
    run = orion.train.run(model=FX, ckpt_dir=str(tmp_path / "api"), progress=False, on_step=seen.append, **OPTS)
    assert isinstance(run, orion.train.Run) and run.step == 3
    assert [r.step for r in seen] == [1, 2, 3]
    a, b = ck.load(str(tmp_path / "cli")).params, ck.load(str(tmp_path / "api")).params
    assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)


def test_trainconfig_defaults_are_the_command_lines():
    tc = orion.train.TrainConfig()
    assert {k: getattr(tc, k) for k in DEFAULTS if hasattr(tc, k)} == {k: v for k, v in DEFAULTS.items()
                                                                        if hasattr(tc, k)}


@pytest.mark.parametrize("bad,phrase", [(dict(stepz=3), "unknown option 'stepz'"),
                                        (dict(mask_prompt="yes"), "True/False"),
                                        (dict(steps=-1), "argument --steps")])
def test_bad_options_are_usage_errors_before_any_work(tmp_path, bad, phrase):
    with pytest.raises(UsageError, match=phrase):
        orion.train.run(model=FX, ckpt_dir=str(tmp_path / "r"), progress=False, **bad)
    assert not os.path.exists(tmp_path / "r")


def test_without_checkpoints_the_weights_come_back(tmp_path):
    out = orion.train.run(preset="micro", steps=1, batch=2, seq_len=32, sample_tokens=0, no_ckpt=True,
                          progress=False)
    assert isinstance(out, orion.train.RunOutcome) and out.result.records[-1].step == 1
    assert "tok_emb" in out.params


def test_resuming_a_finished_run_returns_that_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = orion.train.run(preset="micro", steps=1, batch=2, seq_len=32, sample_tokens=0, progress=False)
    again = orion.train.run(resume="", progress=False)         # the default run folder, already at its step
    assert again.step == first.step == 1 and again.folder == first.folder
