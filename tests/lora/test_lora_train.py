"""LoRA fine-tuning: adapter gradients vs a float64 reference (itself checked against finite differences),
directional finite differences of the device loss, fine-tuning a frozen base lowers the validation loss
with zero compiles/loads per step, adapter-only checkpoints and resume, ``orion train --lora``.

fp16 tolerance: as for the full-model gradients (tests/train/test_gradients.py) each adapter gradient must
match the float64 reference to 1.5 % in relative L2 norm (measured ~0.3 %); a transposed or swapped
gradient, a missing scale or a wrong chain rule fails by orders of magnitude.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))

import np_reference as R  # noqa: E402
from conftest import TRAIN_FAST as FAST  # noqa: E402
from train_helpers import lively_params, micro_config, token_stream  # noqa: E402

import orion  # noqa: E402
from orion import lora as L  # noqa: E402
from orion.train import checkpoint as ck  # noqa: E402
from orion.train.data import TokenDataset  # noqa: E402
from orion.train.errors import ResumeMismatch  # noqa: E402
from orion.train.programs import LayerPrograms  # noqa: E402
from orion.train.step import StepEngine, zero_grads  # noqa: E402
from orion.train.trainer import TrainConfig, Trainer  # noqa: E402

SCALE = 256.0


def _batch(cfg, B=2, seed=0):
    rng = np.random.default_rng(seed)
    tok = rng.integers(0, cfg.vocab_size, (B, cfg.n_ctx + 1))
    return tok[:, :-1], tok[:, 1:]


def _ref_adapter_grads(cfg, p, ad, X, Y):
    """Float64: loss and dL/dA, dL/dB through the merged weights W' = W + s B A (chain rule)."""
    merged = L.merge({k: np.asarray(v, np.float64) for k, v in p.items()}, ad)
    loss, g = R.loss_and_grads(cfg, merged, X, Y)
    out = {}
    for n in ad.names:
        s = ad.scale(n)
        out[n + ".lora_A"] = s * ad.B[n].astype(np.float64).T @ g[n]
        out[n + ".lora_B"] = s * g[n] @ ad.A[n].astype(np.float64).T
    return loss, out


def test_chain_rule_reference_matches_finite_differences():
    cfg = micro_config(dim=16, n_heads=2, n_kv_heads=1, hidden_dim=24, vocab_size=11, seq_len=5, n_layers=2)
    p = {k: v.astype(np.float64) for k, v in lively_params(cfg, 3).items()}
    ad = L.init_adapter(cfg, L.LoraConfig(r=2, alpha=3, targets="all-linear"), seed=4, b_std=0.3)
    X, Y = _batch(cfg, B=2, seed=1)
    _, g = _ref_adapter_grads(cfg, p, ad, X, Y)
    rng = np.random.default_rng(0)
    eps = 1e-6

    def loss():
        return R.loss_only(cfg, L.merge(p, ad), X, Y)

    for name in ad.names:
        for which, arr in (("lora_A", ad.A[name]), ("lora_B", ad.B[name])):
            idx = tuple(rng.integers(0, s) for s in arr.shape)
            old = float(arr[idx])
            ref = g[f"{name}.{which}"][idx]
            arr[idx] = old + eps
            lp = loss()
            arr[idx] = old - eps
            lm = loss()
            arr[idx] = old
            fd = (lp - lm) / (2 * eps)
            # the adapter is float32 (±eps is rounded): tolerance of a float32 step
            assert abs(fd - ref) <= 2e-4 + 2e-3 * abs(fd), (name, which, idx, fd, ref)


@pytest.mark.parametrize("kv_heads,targets", [(4, "all-linear"), (2, "q,k,v,o")])
def test_adapter_gradients_match_float64_reference(kv_heads, targets):
    cfg = micro_config(n_kv_heads=kv_heads)
    p = lively_params(cfg)
    base = {k: v.copy() for k, v in p.items()}
    ad = L.init_adapter(cfg, L.LoraConfig(r=4, alpha=8, targets=targets), seed=1, b_std=0.05)
    X, Y = _batch(cfg)
    orion.reset_counters()
    progs = LayerPrograms(cfg, cfg.n_ctx, p, "dynamic", "sim", lora=ad)
    assert progs.n_programs == 4 * cfg.n_layers and progs.compiles_per_update() == 0
    assert orion.counters()["compiles"] == 4 * cfg.n_layers          # compiled once, base baked
    eng = StepEngine(cfg, progs, p, lora=ad)
    g = zero_grads(ad.params())
    c0 = orion.counters()
    res = eng.microbatch(X, Y, g, SCALE / X.size)
    c1 = orion.counters()
    assert res.finite and c1["compiles"] == c0["compiles"] and c1["loads"] == c0["loads"]
    eng.close()
    ref_loss, ref = _ref_adapter_grads(cfg, p, ad, X, Y)
    assert abs(res.loss_sum / res.n_tokens - ref_loss) < 2e-3 * ref_loss
    assert set(g) == set(ref) == set(ad.params())                     # gradients only for A and B
    for name in ref:
        got = g[name] / SCALE
        nrm = np.linalg.norm(ref[name])
        assert nrm > 0, name
        err = np.linalg.norm(got - ref[name]) / nrm
        assert err < 1.5e-2, f"{name}: relative gradient error {err:.3g}"
    for k in p:                                                        # the base is frozen
        assert np.array_equal(p[k], base[k]), k
    progs.release()


def test_directional_finite_differences_of_the_device_loss():
    cfg = micro_config()
    p = lively_params(cfg)
    ad = L.init_adapter(cfg, L.LoraConfig(r=4, alpha=8, targets="q,v,w2"), seed=2, b_std=0.05)
    X, Y = _batch(cfg)
    progs = LayerPrograms(cfg, cfg.n_ctx, p, "dynamic", "sim", lora=ad)
    eng = StepEngine(cfg, progs, p, lora=ad)
    g = zero_grads(ad.params())
    assert eng.microbatch(X, Y, g, SCALE / X.size).finite
    params = ad.params()

    def loss():
        progs.update()                    # the adapters changed in place: restage their surfaces
        s, n = eng.loss_only(X, Y)
        return s / n

    for name in ("layers.0.wq.lora_B", "layers.1.wv.lora_A", "layers.0.w2.lora_B"):
        d = g[name] / np.linalg.norm(g[name])
        want = float(np.sum(g[name] / SCALE * d))
        eps = 0.05 * max(1.0, float(np.linalg.norm(params[name])))
        old = params[name].copy()
        params[name][...] = old + eps * d
        lp = loss()
        params[name][...] = old - eps * d
        lm = loss()
        params[name][...] = old
        fd = (lp - lm) / (2 * eps)
        assert abs(fd - want) <= 2e-3 + 0.08 * abs(want), (name, fd, want)
    eng.close()
    progs.release()


def _lora_trainer(cfg, p, tc, lcfg, resume=None):
    data = TokenDataset(token_stream(), cfg.n_ctx, cfg.vocab_size, tc.val_fraction, tc.seed)
    ad = L.init_adapter(cfg, lcfg, seed=0, base=p)
    return Trainer(cfg, tc, p, data, lora=ad, resume=resume), ad


def test_lora_finetuning_lowers_validation_loss_with_zero_compiles(tmp_path):
    cfg = micro_config()
    p = lively_params(cfg)
    base = {k: v.copy() for k, v in p.items()}
    tc = TrainConfig(steps=20, batch=2, lr=1e-2, warmup=2, weight_decay=0.0, seed=3, device="sim", val_fraction=0.1,
                     eval_batches=4, ckpt_dir=str(tmp_path / "run"), ckpt_interval=10)
    lcfg = L.LoraConfig(r=4, alpha=8, targets="all-linear")
    t, ad = _lora_trainer(cfg, p, tc, lcfg)
    before = t.evaluate()
    res = t.train()
    t.close()
    after = res.val[-1][1]
    assert after < before - 1.0, (before, after)                     # measured 5.05 -> 2.39
    assert all(r.compiles == 0 and r.loads == 0 for r in res.records)
    assert not any(r.skipped for r in res.records)
    assert all(np.array_equal(p[k], base[k]) for k in p)             # base frozen
    assert any(np.abs(b).max() > 0 for b in ad.B.values())            # B left zero init
    # checkpoints hold the adapters only, with the LoRA config in their state
    c = ck.load(str(tmp_path / "run"))
    assert set(c.params) == set(ad.params()) and set(c.optim) == {f"{m}.{k}" for k in ad.params() for m in "mv"}
    assert c.state["lora"]["r"] == 4 and c.state["lora_base"] == L.base_fingerprint(cfg, p)
    for k, v in ad.params().items():
        np.testing.assert_array_equal(c.params[k], v)


def test_lora_resume_gives_the_same_losses_and_checks_the_config(tmp_path):
    cfg = micro_config()
    tc = TrainConfig(steps=6, batch=2, lr=1e-2, warmup=2, weight_decay=0.0, seed=5, device="sim", val_fraction=0.0,
                     ckpt_dir=str(tmp_path / "run"))
    lcfg = L.LoraConfig(r=4, alpha=8, targets="q,v,w1")
    full, _ = _lora_trainer(cfg, lively_params(cfg), TrainConfig(**{**tc.to_dict(), "ckpt_dir": None}), lcfg)
    want = full.train().losses
    full.close()
    a, _ = _lora_trainer(cfg, lively_params(cfg), tc, lcfg)
    first = a.train(stop_after=3)
    a.close()
    state = ck.load(str(tmp_path / "run"))
    b, _ = _lora_trainer(cfg, lively_params(cfg), tc, lcfg, resume=state)
    rest = b.train()
    b.close()
    np.testing.assert_array_equal(first.losses + rest.losses, want)
    with pytest.raises(ResumeMismatch, match="other base weights"):
        _lora_trainer(cfg, lively_params(cfg, seed=9), tc, lcfg, resume=state)
    with pytest.raises(ResumeMismatch, match="lora.r"):
        _lora_trainer(cfg, lively_params(cfg), tc, L.LoraConfig(r=2, alpha=8, targets="q,v,w1"), resume=state)
    data = TokenDataset(token_stream(), cfg.n_ctx, cfg.vocab_size, 0.0, tc.seed)
    with pytest.raises(ResumeMismatch, match="LoRA"):
        Trainer(cfg, tc, lively_params(cfg), data, resume=state)     # a full-training run cannot resume it


def test_orion_train_lora_cli(tmp_path, capsys, micro_base_run):
    from orion.cli.train import main
    base = micro_base_run
    run = str(tmp_path / "lora")
    assert main(FAST[2:] + ["--model", base, "--lora", "r=4,alpha=8,targets=q,v", "--steps", "4", "--ckpt-dir", run,
                            "--sample-tokens", "8", "--eval-interval", "2"]) == 0
    out = capsys.readouterr().out
    assert "LoRA r=4 alpha=8 on 4 linears (wq, wv;" in out and "(8 programs, 0 compiles per update)" in out
    assert "compiles 0 loads 0 during training" in out and "sample (temperature 0.8)" in out
    # a PEFT folder that loads back onto the base (same fingerprint) and a checkpoint of adapters only
    from orion.train.model import load_pretrained
    cfg, params = load_pretrained(base)
    ad = L.load(os.path.join(run, "adapter"), cfg, params)
    assert ad.names == ["layers.0.wq", "layers.0.wv", "layers.1.wq", "layers.1.wv"] and ad.config.alpha == 8
    assert set(ck.load(run).params) == set(ad.params())
    # resume continues the LoRA run (config from the checkpoint), bad specs are typed errors
    assert main(["--resume", run, "--steps", "5", "--no-progress", "--sample-tokens", "0"]) == 0
    assert "steps 4->5" in capsys.readouterr().out
    assert main(FAST + ["--lora", "r=4,targets=q,nope", "--steps", "1", "--no-ckpt"]) == 1
    assert "unknown target module 'nope'" in capsys.readouterr().err
    assert main(FAST + ["--lora", "r=0", "--steps", "1", "--no-ckpt"]) == 2        # a bad flag value: exit 2
    assert "rank" in capsys.readouterr().err
    assert main(FAST + ["--lora", "r=4,dropout=0.1", "--steps", "1", "--no-ckpt"]) == 2
    assert "applies no adapter dropout" in capsys.readouterr().err
    assert main(FAST + ["--lora", "r=4,targets=q", "--strategy", "recompile", "--steps", "1", "--no-ckpt"]) == 1
    assert "strategy" in capsys.readouterr().err
