"""The run's JSONL log: every record is on disk as soon as it is written (a
killed run's log is complete up to its last step), non-finite values are JSON nulls, and a resumed run
first drops the records past its checkpoint (and a line cut short by a kill)."""

from __future__ import annotations

import json

from orion.train.runlog import RunLog, read_log
from orion.train.trainer import StepRecord


def _rec(step: int, loss: float = 1.0) -> StepRecord:
    return StepRecord(step, loss, 1e-3, 256.0, 0.5, False, 1024, 0.1, 0.05, 0.01, 0.01, 0.2, 0, 0)


def test_records_are_flushed_as_written(tmp_path):
    p = tmp_path / "log.jsonl"
    log = RunLog(str(p))
    log.step(_rec(1))
    log.val(1, 2.5)
    lines = p.read_text().splitlines()                     # read while the writer is still open
    assert json.loads(lines[0])["tokens_per_s"] == 1024 / 0.2 and json.loads(lines[1]) == {"step": 1, "val_loss": 2.5}
    log.step(_rec(2, float("nan")))
    assert json.loads(p.read_text().splitlines()[-1])["loss"] is None
    log.close()


def test_a_resumed_run_drops_what_came_after_its_checkpoint(tmp_path):
    p = tmp_path / "log.jsonl"
    log = RunLog(str(p))
    for s in range(1, 6):
        log.step(_rec(s, float(s)))
    log.val(3, 9.0)
    log.close()
    with open(p, "a") as f:
        f.write('{"step": 6, "lo')                          # killed mid-line
    log = RunLog(str(p), start_step=3)                      # resumed from the step-3 checkpoint
    log.step(_rec(4, 40.0))
    log.close()
    steps, vals = read_log(str(p))
    assert [(r["step"], r["loss"]) for r in steps] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]
    assert [(r["step"], r["val_loss"]) for r in vals] == [(3, 9.0)]
