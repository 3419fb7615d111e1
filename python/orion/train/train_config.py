"""A run's settings (:class:`TrainConfig`), below the checkpoint schema that checks a saved run's settings
against its fields and the trainer that runs them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .defaults import DEFAULTS


@dataclass
class TrainConfig:
    """A run's settings; every default is ``orion train``'s (:data:`orion.train.defaults.DEFAULTS`, the one table
    the command line and :func:`orion.train.run` read), so the same settings give the same run from Python."""
    steps: int = DEFAULTS["steps"]                  # total optimizer steps of the run (the LR schedule's length)
    batch: int = DEFAULTS["batch"]                  # sequences per microbatch
    accum: int = DEFAULTS["accum"]                  # microbatches per optimizer step
    seq_len: int | None = None                      # default: the model's context length
    lr: float = DEFAULTS["lr"]
    warmup: int = DEFAULTS["warmup"]
    min_lr_ratio: float = DEFAULTS["min_lr_ratio"]
    weight_decay: float = DEFAULTS["weight_decay"]
    clip: float = DEFAULTS["clip"]
    loss_scale: float = DEFAULTS["loss_scale"]
    seed: int = DEFAULTS["seed"]
    strategy: str = DEFAULTS["strategy"]
    device: str = DEFAULTS["device"]
    val_fraction: float = DEFAULTS["val_fraction"]
    eval_interval: int = DEFAULTS["eval_interval"]  # steps between validation passes (0: only at the end)
    eval_batches: int = DEFAULTS["eval_batches"]
    ckpt_dir: str | None = None
    ckpt_interval: int = DEFAULTS["ckpt_interval"]  # steps between checkpoints (0: only at the end)
    keep: int = DEFAULTS["keep"]
    fixes: bool = True               # fp16 stability measures (off only for demonstrations/tests)
    residual_scale: float | None = None  # the stream's scale inside the programs (None: probed at the start)
    blas_threads: int | None = None  # CPU BLAS threads during training (None: default_blas_threads)

    # settings a resumed run must share with the checkpoint (everything that changes the trajectory)
    RESUME_KEYS = ("batch", "accum", "seq_len", "lr", "warmup", "min_lr_ratio", "weight_decay", "clip", "seed",
                   "val_fraction", "fixes")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)
