"""The per-step JSONL log of a run (``<run folder>/train_log.jsonl`` by default, ``--log-jsonl PATH``):
one line per optimizer step (step, loss, lr, grad norm, loss scale, tokens/s, the split of the step's
time) and one per validation pass (step, val_loss), flushed as written so a killed run's log is
complete up to its last step. A resumed run first drops the lines past its checkpoint (steps that were
done, then lost with the process), so the log reads as one uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

from ..fileio import atomic_write, iter_jsonl, parse_json
from .errors import DataError

LOG_NAME = "train_log.jsonl"


def _finite(v):
    return v if not isinstance(v, float) or math.isfinite(v) else None      # JSON has no NaN/inf


class RunLog:
    def __init__(self, path: str, start_step: int = 0):
        self.path = os.path.abspath(path)
        if os.path.isfile(self.path):
            self._truncate(start_step)
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.f = open(self.path, "a", encoding="utf-8")

    def _truncate(self, start_step: int) -> None:
        keep, changed = [], False
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    step = parse_json(line, self.path, ValueError).get("step")
                except (ValueError, AttributeError):
                    changed = True                  # a line cut short by a kill (or not a record at all)
                    continue
                if isinstance(step, int) and step > start_step:
                    changed = True
                    continue
                keep.append(line if line.endswith("\n") else line + "\n")
        if changed:
            with atomic_write(self.path, "w") as f:
                f.writelines(keep)

    def _write(self, rec: dict) -> None:
        self.f.write(json.dumps({k: _finite(v) for k, v in rec.items()}) + "\n")
        self.f.flush()

    def step(self, rec) -> None:
        """A :class:`orion.train.trainer.StepRecord`."""
        d = dataclasses.asdict(rec)
        d["tokens_per_s"] = rec.tokens / rec.t_total if rec.t_total > 0 else None
        self._write(d)

    def val(self, step: int, loss: float) -> None:
        self._write({"step": int(step), "val_loss": float(loss)})

    def close(self) -> None:
        self.f.close()


def read_log(path: str) -> tuple[list[dict], list[dict]]:
    """(step records, validation records) of a log; the last record of a step wins."""
    if os.path.isdir(path):
        path = os.path.join(path, LOG_NAME)
    if not os.path.isfile(path):
        raise DataError(f"{path}: no training log here (orion train writes {LOG_NAME} into its run folder)")
    steps, vals = {}, {}
    for _, d in iter_jsonl(path, DataError, skip_invalid=True):     # skipped: a line cut short by a kill
        if not isinstance(d, dict) or not isinstance(d.get("step"), int):
            continue
        if "val_loss" in d:
            vals[d["step"]] = d
        elif "loss" in d:
            steps[d["step"]] = d
    return [steps[k] for k in sorted(steps)], [vals[k] for k in sorted(vals)]
