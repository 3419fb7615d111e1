"""AdamW (decoupled weight decay on matrices only), the warmup + cosine schedule, loss scaling."""

from __future__ import annotations

import math

import numpy as np

from orion import _native
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


def _numpy_chunks_only(opt):
    opt._native_update = lambda *a: False
    return opt


def test_the_native_update_is_the_numpy_chunk_loop_bit_for_bit(monkeypatch):
    """One native pass per tensor (orion's pool) gives the numpy chunk loop's weights and moments exactly:
    the same fp32 operations in the same order, none contracted; gradients over 30 decades (g^2 underflows),
    decayed matrices and undecayed vectors, tensors larger than a work item (16 Ki elements)."""
    rng = np.random.default_rng(3)
    shapes = {"w": (300, 200), "emb": (70, 33), "norm": (200,)}
    params = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
    a, b = {k: v.copy() for k, v in params.items()}, {k: v.copy() for k, v in params.items()}
    native, ref = AdamW(a), _numpy_chunks_only(AdamW(b))
    calls = []
    kernel = _native.adamw_update
    monkeypatch.setattr(_native, "adamw_update", lambda *args: calls.append(args[0].shape) or kernel(*args))
    for t in range(1, 4):
        grads = {k: (rng.standard_normal(s) * 10.0 ** rng.integers(-30, 3, s)).astype(np.float32)
                 for k, s in shapes.items()}
        native.step(a, grads, 1e-3 * t, grad_mul=0.37)
        ref.step(b, grads, 1e-3 * t, grad_mul=0.37)
        for k in shapes:
            for x, y in ((a[k], b[k]), (native.m[k], ref.m[k]), (native.v[k], ref.v[k])):
                np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32), err_msg=f"step {t} {k}")
    assert not np.array_equal(a["w"], params["w"])
    assert calls == [s for _ in range(3) for s in shapes.values()]          # every tensor, every step


def test_non_contiguous_tensors_take_the_numpy_chunks():
    rng = np.random.default_rng(4)
    base = rng.standard_normal((8, 12)).astype(np.float32)
    opt = AdamW({"w": base[:, ::2]})
    assert opt._native_update({"w": base[:, ::2]}, {"w": np.ones((8, 6), np.float32)}, 1e-3, (0.9,) * 6) is False
    before = base.copy()
    opt.step({"w": base[:, ::2]}, {"w": np.ones((8, 6), np.float32)}, 1e-3)
    assert (base[:, ::2] != before[:, ::2]).all() and (base[:, 1::2] == before[:, 1::2]).all()
