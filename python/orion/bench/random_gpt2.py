"""The set-up the decode benchmark scripts share (``benchmarks/bench_batch.py``,
``benchmarks/bench_speculative.py``): their model options, a GPT-2 124M-shaped model with random fp16
weights (the shapes are what the timings depend on) and the line that says what ran where."""

from __future__ import annotations

import os
import warnings

import numpy as np

from ..models import GPT2Config, Model
from ..models.testing import random_weights
from ..native import sim

__all__ = ["add_model_args", "quiet_unbudgeted", "random_gpt2", "describe", "machine_line"]


def add_model_args(ap) -> None:
    """``--layers`` and ``--device`` of the random GPT-2 model."""
    ap.add_argument("--layers", type=int, default=12, help="transformer blocks (GPT-2 124M: 12)")
    ap.add_argument("--device", default="auto", choices=["auto", "sim", "ane"])


def quiet_unbudgeted() -> None:
    """Benchmarks compile many program sets: no per-process compile budget, no warnings in the tables."""
    warnings.simplefilter("ignore")
    sim.set_compile_budget(10**6)


def random_gpt2(layers: int = 12, device: str = "auto", seed: int = 0) -> Model:
    """A GPT-2 124M-shaped :class:`Model` (``layers`` blocks) with random fp16 weights, no stop tokens
    (every run generates the number of tokens asked for)."""
    cfg = GPT2Config(n_layers=layers)
    w16 = {k: v.astype(np.float16) for k, v in random_weights(cfg, seed=seed).items()}
    return Model(cfg, w16, device=device, stop_tokens=[])


def describe(m: Model) -> str:
    c = m.config
    return f"GPT-2 124M-shaped (d={c.d_model}, L={c.n_layers}), random weights"


def machine_line() -> str:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} CPUs, load average {load:.1f}"
