"""``Run(path)``: a look at a training run folder (what ``orion train`` writes) for notebooks and scripts - its
checkpoints, the latest one's configuration, the last losses (the per-step JSONL log when the folder has
one, else the loss history kept in the checkpoint's state.json) and validation losses. Read-only."""

from __future__ import annotations

import math
import os

from .. import _html
from . import checkpoint as ckpt
from ..fileio import iter_jsonl
from .errors import CheckpointError

LAST = 10   # losses shown by the reprs


class Run:
    """A run folder (``latest.json`` + ``step-*`` checkpoints) or one checkpoint folder inside it."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.path.abspath(os.fspath(path))
        self.latest = ckpt.resolve(self.path)                 # CheckpointError when not a run / checkpoint
        self.state = ckpt.read_state(self.latest)
        self.folder = self.path if self.latest != self.path else os.path.dirname(self.latest)

    # -- contents --------------------------------------------------------------------------------
    @property
    def step(self) -> int:
        return int(self.state["step"])

    @property
    def checkpoints(self) -> list[tuple[int, str]]:
        """(step, folder) of every complete checkpoint in the run folder, oldest first."""
        out = []
        for name in sorted(os.listdir(self.folder)):
            full = os.path.join(self.folder, name)
            if name.startswith("step-") and os.path.isfile(os.path.join(full, "state.json")):
                try:
                    out.append((int(name[5:]), full))
                except ValueError:
                    continue
        return out

    @property
    def model_config(self) -> dict:
        return dict(self.state.get("model") or {})

    @property
    def train_config(self) -> dict:
        return dict(self.state.get("train") or {})

    def log_records(self) -> list[dict]:
        """The per-step records of the run folder's ``*.jsonl`` log(s), in file order (empty without one);
        a torn last line (a run killed mid-write) is skipped."""
        recs = []
        for name in sorted(os.listdir(self.folder)):
            if not name.endswith(".jsonl"):
                continue
            for _, rec in iter_jsonl(os.path.join(self.folder, name), CheckpointError, skip_invalid=True):
                if isinstance(rec, dict):
                    recs.append(rec)
        return recs

    def losses(self) -> list[tuple[int, float | None]]:
        """(step, training loss) per step: from the log when it has losses, else state.json's history (the
        latest checkpoint's last steps; None where a step overflowed)."""
        logged = [(int(r["step"]), r["loss"]) for r in self.log_records() if "step" in r and "loss" in r]
        if logged:
            return logged
        hist = self.state.get("history") or []
        first = self.step - len(hist) + 1
        return [(first + i, v) for i, v in enumerate(hist)]

    def val_losses(self) -> list[tuple[int, float]]:
        """(step, validation loss) from the log's records that carry one."""
        out = []
        for r in self.log_records():
            for key in ("val_loss", "val"):
                if isinstance(r.get(key), (int, float)) and "step" in r:
                    out.append((int(r["step"]), float(r[key])))
                    break
        return out

    # -- display ---------------------------------------------------------------------------------
    def _summary_rows(self) -> list[tuple[str, object]]:
        m, t = self.model_config, self.train_config
        shape = ", ".join(f"{k}={m[k]}" for k in ("model_type", "d_model", "n_layers", "n_heads", "vocab_size")
                          if k in m)
        rows = [("latest", f"step {self.step}: {self.latest}"),
                ("checkpoints", ", ".join(str(s) for s, _ in self.checkpoints) or "none"),
                ("model", shape or "?"),
                ("training", ", ".join(f"{k}={t[k]}" for k in ("steps", "lr", "batch", "seq_len", "strategy")
                                       if k in t) or "?")]
        if self.state.get("lora"):
            rows.append(("LoRA", self.state["lora"]))
        last = self.losses()[-LAST:]
        rows.append((f"last {len(last)} losses", " ".join(_fmt(v) for _, v in last) or "none recorded"))
        val = self.val_losses()
        if val:
            rows.append(("validation loss", f"{val[-1][1]:.4f} at step {val[-1][0]}"))
        return rows

    def __repr__(self) -> str:
        last = self.losses()[-1:] or [(None, None)]
        return (f"<orion.train.Run {self.folder}: step {self.step}, {len(self.checkpoints)} checkpoint(s), "
                f"last loss {_fmt(last[0][1])}>")

    def _repr_html_(self) -> str:
        return _html.title("orion training run", self.folder) + _html.items(self._summary_rows())


def _fmt(v) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.4f}"


__all__ = ["Run", "CheckpointError"]
