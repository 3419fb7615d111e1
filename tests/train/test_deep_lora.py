"""LoRA fine-tuning at real depth: deeper than ``programs.LORA_BAKED_LAYERS`` the frozen base is
not baked into 4 programs per layer (4·L compiles; C05 allows ~119 per process) but shares the dynamic
strategy's 4 programs, each layer's base weights and adapters staged into their inputs. Adapter
gradients against the float64 reference (tolerance of test_gradients.py), and ``orion train
--init DEEP --lora`` on a 36-layer copy of a family fixture in one budget of 119 compiles."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

import np_reference as R
import orion
from orion import lora as L
from orion.train.programs import KINDS, LORA_BAKED_LAYERS, LayerPrograms
from orion.train.step import StepEngine, zero_grads
from train_helpers import lively_params, micro_config

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from deep_models import make_deep  # noqa: E402


def _adapter_grads(cfg, p, ad, X, Y, monkeypatch, baked_layers):
    import orion.train.programs as programs
    monkeypatch.setattr(programs, "LORA_BAKED_LAYERS", baked_layers)
    progs = LayerPrograms(cfg, cfg.n_ctx, p, "dynamic", "sim", lora=ad)
    eng = StepEngine(cfg, progs, p, lora=ad)
    g = zero_grads(ad.params())
    try:
        res = eng.microbatch(X, Y, g, 256.0 / X.size)
        return res, {k: v / 256.0 for k, v in g.items()}, progs.lora_shared, progs.n_programs
    finally:
        eng.close()
        progs.release()


@pytest.mark.parametrize("extra", [{}, dict(qkv_bias=True, n_kv_heads=2), dict(qk_norm=True, head_dim=32)])
def test_deep_lora_shares_four_programs_and_its_gradients_are_exact(extra, monkeypatch):
    """The shared programs give the baked programs' adapter gradients bit for bit, and both the float64
    reference's within 3 % (10 layers of fp16: the worst adapter's error is fp16 rounding noise, 1.1-2.3 %
    over data seeds 0-3 on the biased model, with the numpy and the native fp32 CPU GEMMs alike; a real
    gradient bug is tens of %; test_gradients.py's 2-layer models stay within 1.5 %)."""
    cfg = micro_config(n_layers=LORA_BAKED_LAYERS + 2, seq_len=32, **extra)
    p = lively_params(cfg)
    ad = L.init_adapter(cfg, L.LoraConfig(r=4, alpha=8, targets="all-linear"), seed=1, b_std=0.05)
    rng = np.random.default_rng(0)
    tok = rng.integers(0, cfg.vocab_size, (2, cfg.n_ctx + 1))
    X, Y = tok[:, :-1], tok[:, 1:]
    res, g, shared, n = _adapter_grads(cfg, p, ad, X, Y, monkeypatch, LORA_BAKED_LAYERS)
    assert shared and n == len(KINDS) and res.finite
    res_b, g_b, shared_b, n_b = _adapter_grads(cfg, p, ad, X, Y, monkeypatch, 10 ** 6)
    assert not shared_b and n_b == len(KINDS) * cfg.n_layers
    assert res.loss_sum == res_b.loss_sum and all(np.array_equal(g[k], g_b[k]) for k in g)
    merged = L.merge({k: np.asarray(v, np.float64) for k, v in p.items()}, ad)
    ref_loss, gw = R.loss_and_grads(cfg, merged, X, Y)
    ref = R.adapter_grads(ad, gw)
    assert abs(res.loss_sum / res.n_tokens - ref_loss) < 2e-3 * ref_loss
    for name in ref:
        err = np.linalg.norm(g[name] - ref[name]) / np.linalg.norm(ref[name])
        assert err < 3e-2, f"{name}: relative gradient error {err:.3g}"


def test_orion_train_lora_on_a_36_layer_model_in_one_budget(tmp_path, capsys):
    from orion.cli.train import main
    deep = make_deep("qwen3", str(tmp_path / "deep"))
    (tmp_path / "data.txt").write_text("Once upon a time, a little fox named Tom found a shiny red ball. " * 60)
    orion.sim.reset_compile_budget()
    orion.sim.set_compile_budget(119)
    try:
        run = tmp_path / "run"
        assert main(["--model", deep, "--lora", "r=4,alpha=8", "--data", str(tmp_path / "data.txt"), "--steps", "2",
                     "--batch", "1", "--seq-len", "32", "--no-progress", "--sample-tokens", "0",
                     "--ckpt-dir", str(run)]) == 0
        used = orion.sim.compile_budget()[0]
    finally:
        orion.sim.set_compile_budget(10 ** 9)
    assert used <= 60, used
    assert "base frozen, shared by every layer as program inputs) (4 programs" in capsys.readouterr().out
    recs = [json.loads(x) for x in (run / "train_log.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["loss"]) for r in recs if "loss" in r)
