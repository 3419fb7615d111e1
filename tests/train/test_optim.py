"""AdamW (decoupled weight decay on matrices only), the warmup + cosine schedule, loss scaling."""

from __future__ import annotations

import math

import numpy as np

from orion.train.optim import AdamW, LossScaler, Schedule, global_norm


def test_adamw_matches_the_textbook_update():
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((4, 3)).astype(np.float32), "norm": rng.standard_normal(3).astype(np.float32)}
    ref = {k: v.astype(np.float64) for k, v in params.items()}
    m = {k: np.zeros_like(v) for k, v in ref.items()}
    v = {k: np.zeros_like(x) for k, x in ref.items()}
    opt = AdamW(params, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    for t in range(1, 4):
        grads = {k: rng.standard_normal(p.shape).astype(np.float32) * 3 for k, p in params.items()}
        lr, mul = 1e-2 * t, 0.5
        opt.step(params, grads, lr, grad_mul=mul)
        for k in ref:
            g = grads[k].astype(np.float64) * mul
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.95 * v[k] + 0.05 * g * g
            if k == "w":
                ref[k] *= 1 - lr * 0.1                       # decoupled decay, matrices only
            ref[k] -= lr * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.95 ** t)) + 1e-8)
            np.testing.assert_allclose(params[k], ref[k], rtol=2e-6, atol=1e-6)
    assert opt.t == 3


def test_schedule_warmup_then_cosine_to_ten_percent():
    s = Schedule(lr=1.0, warmup=10, total=110, min_ratio=0.1)
    assert s(0) == 0.1 and s(9) == 1.0
    assert math.isclose(s(10), 1.0) and math.isclose(s(60), 0.55) and math.isclose(s(110), 0.1)
    assert all(s(i) >= s(i + 1) for i in range(10, 120))


def test_loss_scaler_halves_on_overflow_and_grows_after_good_steps():
    sc = LossScaler(scale=256.0, growth_interval=3)
    sc.update(False)
    assert sc.scale == 128.0 and sc.overflows == 1
    for _ in range(3):
        sc.update(True)
    assert sc.scale == 256.0
    st = sc.state()
    other = LossScaler()
    other.load(st)
    assert other.state() == st


def test_global_norm_propagates_non_finite():
    assert math.isclose(global_norm({"a": np.array([3.0], np.float32), "b": np.array([4.0], np.float32)}), 5.0)
    assert math.isinf(global_norm({"a": np.array([np.inf], np.float32)}))
    assert math.isnan(global_norm({"a": np.array([np.nan, 1.0], np.float32)}))
