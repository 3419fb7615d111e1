"""Sizes checked before anything is allocated (training side): a run that cannot fit is a
ModelTooLarge naming what to lower, raised at once (no MemoryError, no init that never ends)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from train_helpers import micro_config
from orion.train.data import TokenDataset
from orion.train.errors import ModelTooLarge
from orion.train.memory import check_memory, estimate
from orion.train.model import init_params, n_params, resized
from orion.train.trainer import TrainConfig, Trainer
from orion.train.model import PRESETS

GiB = 1 << 30


def test_the_estimate_counts_every_parameter():
    cfg = PRESETS["tiny"]
    est = estimate(cfg, 8, 128)
    assert est["params"] == n_params(cfg)
    big = resized(cfg, n_layers=300)                     # the per-layer path (no table of every layer)
    assert estimate(big, 8, 128)["params"] == n_params(big)
    assert est["weights"] == n_params(cfg) * 18          # fp32 weights, grads, two moments + fp16 device copy


@pytest.mark.parametrize("over,lower", [({"seq_len": 100000}, "--seq-len"), ({"dim": 1000000}, "--dim"),
                                        ({"n_layers": 100000}, "--layers")])
def test_absurd_sizes_are_refused_at_once(over, lower):
    cfg = resized(PRESETS["tiny"], **over)
    t0 = time.perf_counter()
    with pytest.raises(ModelTooLarge, match=lower) as e:
        check_memory(cfg, 8, cfg.n_ctx, available=16 * GiB)
    assert time.perf_counter() - t0 < 2.0
    assert "GiB" in str(e.value)


def test_the_default_run_fits_a_small_machine():
    cfg = PRESETS["tiny"]
    assert check_memory(cfg, 8, 128, available=1 * GiB)["total"] < 200 * (1 << 20)


def test_the_trainer_checks_before_building_programs(monkeypatch):
    import orion.train.memory as mem
    monkeypatch.setattr(mem, "available_bytes", lambda: 1 << 20)        # a 1 MiB machine
    cfg = micro_config()
    tokens = (np.arange(4000) % cfg.vocab_size).astype(np.uint16)
    with pytest.raises(ModelTooLarge, match="lower"):
        Trainer(cfg, TrainConfig(steps=1, batch=2, device="sim"), init_params(cfg),
                TokenDataset(tokens, cfg.n_ctx, cfg.vocab_size, 0.0))
