"""``orion plot RUN``: loss.png from the run's log when matplotlib (the optional [plot]
extra) is installed; without it a TrainError that says how to install it."""

from __future__ import annotations

import sys

import pytest

from orion.train.errors import TrainError
from orion.train.plot import PlotUnavailable, plot_run
from orion.train.runlog import RunLog
from orion.train.trainer import StepRecord


@pytest.fixture
def run(tmp_path):
    log = RunLog(str(tmp_path / "train_log.jsonl"))
    for s in range(1, 31):
        log.step(StepRecord(s, 5.0 - s / 10, 1e-3, 256.0, 0.5, False, 1024, 0.1, 0.05, 0.01, 0.01, 0.2, 0, 0))
        if s % 10 == 0:
            log.val(s, 5.2 - s / 10)
    log.close()
    return tmp_path


def test_without_matplotlib_the_error_says_how_to_install_it(run, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)          # import matplotlib -> ImportError
    with pytest.raises(PlotUnavailable, match=r"orion-ane\[plot\]"):
        plot_run(str(run))
    assert not (run / "loss.png").exists()


def test_a_folder_without_a_log_is_an_error(tmp_path):
    with pytest.raises(TrainError, match="no training log"):
        plot_run(str(tmp_path))


def test_loss_png_is_written(run):
    pytest.importorskip("matplotlib")
    out = plot_run(str(run))
    assert out == str(run / "loss.png")
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
