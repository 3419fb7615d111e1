"""Helpers for the training tests: a micro Llama (d 64, 2 layers, S 64) with lively weights and a
learnable token stream (plain functions, no conftest: tests/ has one conftest namespace)."""

from __future__ import annotations

import numpy as np

from orion.models.config import LlamaConfig
from orion.train.model import init_params, llama_config


def micro_config(**kw) -> LlamaConfig:
    base = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=4, vocab_size=96, hidden_dim=160, seq_len=64)
    base.update(kw)
    return llama_config(**base)


def lively_params(cfg: LlamaConfig, seed: int = 1) -> dict:
    """llama2.c init scaled up (and norms jittered) so attention and every path carry real gradients."""
    p = init_params(cfg, seed)
    rng = np.random.default_rng(seed + 100)
    for k in p:
        if p[k].ndim == 1:
            p[k] = (1 + 0.2 * rng.standard_normal(p[k].shape)).astype(np.float32)
        else:
            p[k] = (p[k] * 5).astype(np.float32)
    return p


def minimal_state(cfg: LlamaConfig | None = None, **extra) -> dict:
    """The smallest state.json content the checkpoint schema accepts (plus ``extra`` keys)."""
    s = {"model": (cfg or micro_config()).to_dict(), "train": {"batch": 2}, "optimizer": {"t": 0},
         "scaler": {"scale": 256.0, "good_steps": 0}, "data": {"epoch": 0, "cursor": 0}}
    s.update(extra)
    return s


def token_stream() -> np.ndarray:
    """A learnable stream: a noisy repeating pattern over 96 ids."""
    rng = np.random.default_rng(7)
    base = np.tile(np.arange(40) % 96, 200)
    noise = rng.integers(0, 96, base.size)
    return np.where(rng.random(base.size) < 0.1, noise, base).astype(np.uint16)
