"""The model definition evaluated on the host (orion.models.host_run: models/llama.py's stage graphs run by the
float64 graph interpreter with a KV cache) equals the independent float64 oracle (models/reference.py) on
every family fixture - logits, fed whole or in pieces, and the fp16 probe's peaks - and the engine no longer
runs the oracle: its fp16 probe and re-plan, and the training sample, evaluate the definition."""

from __future__ import annotations

import os

import numpy as np
import pytest

from orion.models import load, reference
from orion.models.host_run import HostRun
from orion.models.loaders import read_checkpoint

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
NAMES = sorted(n for n in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, n, "reference.npz")))


@pytest.mark.parametrize("name", NAMES)
def test_the_definition_on_the_host_equals_the_float64_oracle(name):
    ck = read_checkpoint(os.path.join(FIXTURES, name))
    cfg, w = ck.config, ck.weights
    ids = np.load(os.path.join(FIXTURES, name, "reference.npz"))["ids"][:30].tolist()   # past every window
    want = reference.forward(cfg, w, ids)
    run = HostRun(cfg, w, len(ids), peaks=True)
    z = run.logits(ids)
    assert np.abs(z - want).max() < 1e-6 * np.abs(want).max()       # float32 RoPE tables, the rest float64
    pieces = HostRun(cfg, w, len(ids))
    got = np.concatenate([pieces.logits(ids[:7]), pieces.logits(ids[7:8]), pieces.logits(ids[8:])])
    assert np.abs(got - want).max() < 1e-6 * np.abs(want).max()
    stats: dict = {}
    reference.llama_forward(cfg, w, ids, stats=stats)
    assert run.max_abs_stream == pytest.approx(stats["max_abs_residual"], rel=1e-6)
    assert run.max_abs_branch == pytest.approx(stats["max_abs_branch"], rel=1e-6)


def test_a_feed_past_its_positions_is_refused():
    ck = read_checkpoint(os.path.join(FIXTURES, "qwen3"))
    run = HostRun(ck.config, ck.weights, 4)
    run.feed([1, 2, 3])
    with pytest.raises(ValueError, match="exceeds the 4 positions"):
        run.feed([4, 5])


def test_the_engine_and_the_training_sample_do_not_run_the_oracle(monkeypatch, tmp_path):
    def oracle(*a, **k):
        raise AssertionError("models/reference.py ran outside the tests")
    for name in ("forward", "llama_forward", "gpt2_forward"):
        monkeypatch.setattr(reference, name, oracle)
    m = load(os.path.join(FIXTURES, "..", "models", "massive", "llama3_mlp_6e5"), device="sim", cache=str(tmp_path))
    try:
        assert m.engine.residual_scale < 1                    # the probe ran (on the definition)
        assert len(m.generate([1, 2, 3], max_tokens=3, stop_tokens=[]).tokens) == 3
    finally:
        m.release()
    from orion.train.model import load_pretrained
    from orion.train.sample import generate
    cfg, p = load_pretrained(os.path.join(FIXTURES, "gemma3"))
    assert len(generate(cfg, p, [2, 5, 7], 5)) == 5


def test_a_single_pass_keeps_no_stage_weights_and_a_cached_run_gives_the_same_logits():
    """The probe and calibration feed once: each stage's graph and float64 weights are dropped after it ran
    (peak memory of one stage, not the model in float64); the sampler's cached run reuses them."""
    ck = read_checkpoint(os.path.join(FIXTURES, "gemma3"))
    ids = np.load(os.path.join(FIXTURES, "gemma3", "reference.npz"))["ids"][:12].tolist()
    once = HostRun(ck.config, ck.weights, len(ids))
    z = once.logits(ids)
    assert not once._graphs and once._consts is None
    kept = HostRun(ck.config, ck.weights, len(ids), cache=True)
    assert np.array_equal(kept.logits(ids), z)
    assert len(kept._graphs) == ck.config.n_layers + 1 and kept._consts
