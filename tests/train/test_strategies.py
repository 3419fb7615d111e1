"""Weight-update strategies: dynamic and recompile give the same losses; a step never runs with stale
device weights; compile/load counts per step; the compile budget stops a recompile run cleanly."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from train_helpers import lively_params, micro_config, token_stream
from orion.train import checkpoint as ck
from orion.train.data import TokenDataset
from orion.train.errors import StrategyUnavailable
from orion.train.programs import KINDS, LayerPrograms, build_graph, layer_weights
from orion.train.trainer import TrainConfig, Trainer


def _trainer(cfg, tokens, strategy="dynamic", steps=4, **kw):
    tc = TrainConfig(steps=steps, batch=2, accum=kw.pop("accum", 1), lr=3e-3, warmup=1, seed=3, strategy=strategy,
                     device="sim", val_fraction=0.0, **kw)
    data = TokenDataset(tokens, cfg.n_ctx, cfg.vocab_size, tc.val_fraction, tc.seed)
    return Trainer(cfg, tc, lively_params(cfg), data)


def test_dynamic_and_recompile_give_the_same_losses():
    cfg = micro_config()
    tokens = token_stream()
    runs = {}
    for strategy in ("dynamic", "recompile"):
        t = _trainer(cfg, tokens, strategy, accum=2)
        res = t.train()
        runs[strategy] = (res.losses, [r.compiles for r in res.records], [r.loads for r in res.records])
        t.close()
    ld, lr_ = runs["dynamic"][0], runs["recompile"][0]
    assert len(ld) == 4 and ld[-1] < ld[0]
    np.testing.assert_allclose(ld, lr_, rtol=2e-4)
    assert runs["dynamic"][1] == [0, 0, 0, 0] and runs["dynamic"][2] == [0, 0, 0, 0]
    n = len(KINDS) * cfg.n_layers
    assert runs["recompile"][1] == [n] * 4 and runs["recompile"][2] == [n] * 4


def _fresh_outputs(cfg, params, kind, layer, inputs):
    g = build_graph(kind, cfg, cfg.n_ctx, layer_weights(kind, params, layer), layer=layer)
    prog = orion.compile(g, device="sim")
    try:
        return prog.run(inputs)
    finally:
        prog.release()


FEATURES = {"plain": {}, "families": dict(qkv_bias=True, qk_norm=True, sliding_window=8, local_rope_theta=100.0,
                                         layer_types=["sliding", "full"])}


@pytest.mark.parametrize("features", sorted(FEATURES))
@pytest.mark.parametrize("strategy", ["dynamic", "recompile"])
def test_updated_weights_reach_the_device(strategy, features):
    """After an update, every layer's program output equals a fresh compile with the new weights; a
    missed or no-op update (an upstream trainer's in-place 'reload', C07) would still produce the old outputs.
    With biases and q/k norms the baked programs take those vectors as inputs (programs.lean_baked): staged too."""
    cfg = micro_config(**FEATURES[features])
    p = lively_params(cfg)
    progs = LayerPrograms(cfg, cfg.n_ctx, p, strategy, "sim")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, cfg.d_model, 1, cfg.n_ctx)).astype(np.float32)
    before = {layer: progs.run("attn_fwd", layer, x=x)["o"] for layer in range(cfg.n_layers)}
    for k in p:                                         # an "optimizer step" that changes every weight
        p[k] += (0.05 * rng.standard_normal(p[k].shape)).astype(np.float32)
    c0 = orion.counters()
    progs.update(p)
    c1 = orion.counters()
    for layer in (1, 0, 1):                             # out of order: staging must follow the layer
        got = progs.run("attn_fwd", layer, x=x)
        want = _fresh_outputs(cfg, p, "attn_fwd", layer, {"x": x})
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{strategy} layer {layer} output {name}")
        assert np.abs(got["o"] - before[layer]).max() > 1e-2, "weights did not change the output"
    if strategy == "dynamic":
        assert c1["compiles"] == c0["compiles"] and c1["loads"] == c0["loads"]
    else:
        assert c1["compiles"] - c0["compiles"] == len(KINDS) * cfg.n_layers
    progs.release()


def test_a_no_op_update_is_detected():
    """The same comparison catches an update that never reaches the device (C07-style stale weights)."""
    cfg = micro_config()
    p = lively_params(cfg)
    progs = LayerPrograms(cfg, cfg.n_ctx, p, "dynamic", "sim")
    x = np.ones((1, cfg.d_model, 1, cfg.n_ctx), np.float32)
    progs.run("ffn_fwd", 0, x=x)
    p["layers.0.w2"] *= 2.0
    stale = progs.run("ffn_fwd", 0, x=x)["f"]           # no update() call: the version did not move
    want = _fresh_outputs(cfg, p, "ffn_fwd", 0, {"x": x})["f"]
    assert np.abs(stale - want).max() > 1e-2
    progs.update(p)
    np.testing.assert_array_equal(progs.run("ffn_fwd", 0, x=x)["f"], want)
    progs.release()


def test_compile_budget_stops_and_resume_continues(tmp_path):
    cfg = micro_config()
    tokens = token_stream()
    n = len(KINDS) * cfg.n_layers
    used, _ = orion.sim.compile_budget()
    orion.sim.set_compile_budget(used + 2 * n + 3)      # initial compile + one update, then out of budget
    try:
        t = _trainer(cfg, tokens, "recompile", steps=4, ckpt_dir=str(tmp_path / "run"))
        res = t.train()
        t.close()
        assert res.status == "budget" and res.step == 2 and len(res.records) == 2
        assert "--resume" in res.message and "budget" in res.message
        assert ck.read_state(str(tmp_path / "run"))["step"] == 2
    finally:
        orion.sim.set_compile_budget(10 ** 9)
    state = ck.load(str(tmp_path / "run"))
    t2 = Trainer(cfg, t.tc, lively_params(cfg), TokenDataset(tokens, cfg.n_ctx, cfg.vocab_size, 0.0, 3),
                 resume=state)
    res2 = t2.train()
    t2.close()
    assert res2.status == "done" and res2.step == 4
    ref = _trainer(cfg, tokens, "dynamic", steps=4)
    np.testing.assert_allclose(res.losses + res2.losses, ref.train().losses, rtol=2e-4)
    ref.close()


def test_delta_needs_a_doctor_verdict():
    cfg = micro_config()
    from orion.cli.doctor import allowed_strategies
    if any(s.startswith("delta") for s in allowed_strategies("sim", announce=False)):
        pytest.skip("a cached `orion doctor` verdict allows delta on this machine")
    with pytest.raises(StrategyUnavailable, match="orion doctor"):
        LayerPrograms(cfg, cfg.n_ctx, lively_params(cfg), "delta", "sim")


@pytest.mark.parametrize("features", sorted(FEATURES))
def test_delta_with_a_verified_verdict_updates_weights(features):
    cfg = micro_config(**FEATURES[features])
    from orion.cli.doctor import machine
    from orion.native.sim import Profile
    verdict = {"machine": machine("sim", Profile(delta="paper")), "results": {
        "dynamic": {"verdict": "works"}, "recompile": {"verdict": "works", "ms": 50.0},
        "delta_reload": {"verdict": "works", "budget_free": True, "ms": 1.0}}}
    p = lively_params(cfg)
    progs = LayerPrograms(cfg, cfg.n_ctx, p, "delta", "sim", profile=Profile(delta="paper"), doctor_verdict=verdict)
    assert progs.delta_method == "delta_reload"
    x = np.ones((1, cfg.d_model, 1, cfg.n_ctx), np.float32)
    p["layers.1.w1"] *= -1.5
    for k in ("layers.1.rms_att", "layers.1.bq", "layers.1.q_norm"):   # vector inputs of lean programs
        if k in p:
            p[k] *= 1.5
    progs.update(p)
    want = _fresh_outputs(cfg, p, "ffn_fwd", 1, {"x": x})["f"]
    np.testing.assert_array_equal(progs.run("ffn_fwd", 1, x=x)["f"], want)
    want = _fresh_outputs(cfg, p, "attn_fwd", 1, {"x": x})
    got = progs.run("attn_fwd", 1, x=x)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    progs.release()
