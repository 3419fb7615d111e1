"""bf16 checkpoints with "massive activations" run without NaN.

The fixtures (tests/fixtures/models/massive, made by scripts/make_massive_fixtures.py with transformers)
are the family fixtures saved in bf16 with ONE projection of layer 0 - the attention output or the MLP
output - reaching 2e5 or 6e5 (beyond fp16's 65,504) at one trigger token of the prompt only, as
bf16-trained Qwen2/Llama checkpoints do. They hold transformers' logits (fp32 compute on the bf16
weights, every position) and its greedy ids.

Tolerances as in test_families.py: logits within 0.05 of max |logit| (and closer to transformers' fp32 than
transformers' bf16 run of the same checkpoint); argmax equal where transformers'
top-2 margin exceeds 0.01 of max |logit|; greedy ids equal up to the first step whose float64 margin is
below that.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from orion.models import load, reference
from orion.models.fp16_safety import CALIBRATION_TEXT, FP16_MAX, Fp16RangeError, calibration_ids, stream_peaks
from orion.models.loaders import read_checkpoint

ROOT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "massive")
NAMES = sorted(n for n in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, n, "reference.npz")))
FAMILIES = ("llama3", "qwen2", "qwen3", "mistral", "phi3", "gemma3")


def _ref(name):
    return np.load(os.path.join(ROOT, name, "reference.npz"))


def _close_to_transformers(z, want):
    assert np.isfinite(z).all()
    scale = np.abs(want).max()
    assert np.abs(z - want).max() / scale < 0.05
    top2 = np.sort(want, axis=-1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 0.01 * scale
    assert (z.argmax(-1) == want.argmax(-1))[clear].all()


def _greedy_prefix(cfg, w, ids, want) -> int:
    """How many of transformers' greedy ids must match: up to the first step whose top-2 margin (float64
    reference) is below 0.01 of max |logit|."""
    seq = list(ids)
    for i, t in enumerate(want):
        z = reference.forward(cfg, w, seq)[-1]
        top2 = np.sort(z)[-2:]
        if top2[1] - top2[0] < 0.01 * np.abs(z).max():
            return i
        seq.append(int(t))
    return len(want)


def test_every_family_site_and_peak_has_a_fixture():
    want = {f"{f}_{s}_{p}" for f in FAMILIES for s in ("attn", "mlp") for p in ("2e5", "6e5")}
    assert want <= set(NAMES)
    for name in NAMES:
        r = _ref(name)
        assert r["peak"] > 0.9 * float(name.rsplit("_", 1)[1])       # the projection really reaches it
        assert int((r["ids"] == r["trigger"]).sum()) == 1               # one token of the prompt triggers it
        assert read_checkpoint(os.path.join(ROOT, name)).config.model_type  # loads


@pytest.mark.parametrize("name", NAMES)
def test_float64_reference_equals_transformers_and_sees_the_peak(name):
    ck = read_checkpoint(os.path.join(ROOT, name))
    r = _ref(name)
    z = reference.forward(ck.config, ck.weights, r["ids"].tolist())
    assert np.abs(z - r["logits"]).max() / np.abs(r["logits"]).max() < 1e-4
    residual, branch = stream_peaks(ck.config, ck.weights, r["ids"].tolist())
    assert max(residual, branch) > 0.9 * r["peak"] > FP16_MAX


@pytest.mark.parametrize("name", NAMES)
def test_programs_match_transformers_with_the_peak(name, tmp_path):
    """The load-time probe sees the peak (its ids spread over the vocabulary hit the trigger) or the
    run-time check re-plans: either way finite logits that match transformers', and greedy ids."""
    r = _ref(name)
    ids = r["ids"].tolist()
    m = load(os.path.join(ROOT, name), device="sim", cache=str(tmp_path))
    try:
        z = m.logits(ids)
        _close_to_transformers(z, r["logits"])
        # what a user would compare with: closer to transformers' fp32 than transformers' own bf16 run is
        assert np.abs(z - r["logits"]).max() < np.abs(r["logits_bf16"] - r["logits"]).max()
        assert m.engine.residual_scale < 1
        n = _greedy_prefix(m.config, m.weights, ids, r["greedy"].tolist())
        g = m.generate(ids, max_tokens=len(r["greedy"]), stop_tokens=[])
        assert g.tokens[:n] == r["greedy"].tolist()[:n]
    finally:
        m.release()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("site", ["attn", "mlp"])
def test_a_peak_the_probe_missed_is_replanned_at_run_time(family, site, tmp_path, caplog):
    """A probe without the trigger token plans no scale; the first prompt with it overflows a stage,
    which the engine notices, re-plans on that text (stated once) and answers like transformers."""
    name = f"{family}_{site}_6e5"
    r = _ref(name)
    ids, trig = r["ids"].tolist(), int(r["trigger"])
    probe = [t for t in ids if t != trig]
    m = load(os.path.join(ROOT, name), device="sim", cache=str(tmp_path), probe_ids=probe)
    try:
        assert m.engine.residual_scale == 1.0
        before = m.engine.compiles
        with caplog.at_level(logging.WARNING, logger="orion"):
            z = m.logits(ids)
        _close_to_transformers(z, r["logits"])
        assert m.engine.residual_scale <= 2.0 ** -8          # 6e5 * 16 headroom / 65504 -> 2^-8
        assert sum("overflowed fp16" in rec.getMessage() for rec in caplog.records) == 1
        assert m.engine.compiles > before
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="orion"):
            _close_to_transformers(m.logits(ids), r["logits"])          # no second re-plan
        assert not caplog.records
    finally:
        m.release()


def test_a_forced_scale_that_overflows_is_a_typed_error_naming_the_layer(tmp_path):
    r = _ref("llama3_mlp_6e5")
    m = load(os.path.join(ROOT, "llama3_mlp_6e5"), device="sim", cache=str(tmp_path), residual_scale=1.0)
    try:
        with pytest.raises(Fp16RangeError, match=r"^layer 0: .*residual_scale=") as e:
            m.logits(r["ids"].tolist())
        assert e.value.layer == 0
    finally:
        m.release()


def test_forced_scale_small_enough_runs(tmp_path):
    r = _ref("qwen3_attn_6e5")
    m = load(os.path.join(ROOT, "qwen3_attn_6e5"), device="sim", cache=str(tmp_path), residual_scale=2.0 ** -6)
    try:
        _close_to_transformers(m.logits(r["ids"].tolist()), r["logits"])
    finally:
        m.release()


def test_calibration_ids_hold_specials_text_and_spread_ids():
    folder = os.path.join(ROOT, "..", "llama3")
    m = load(folder, device="sim")
    try:
        ids = calibration_ids(m.config, m.tokenizer)
        assert ids[0] == m.config.bos_id
        assert set(m.tokenizer.special_ids) <= set(ids)
        assert m.config.vocab_size - 1 in ids and len(ids) > 64
        assert all(0 <= i < m.config.vocab_size for i in ids) and len(ids) <= min(160, m.config.n_ctx)
        text = m.tokenizer.encode(CALIBRATION_TEXT)
        assert ids[1:1 + min(80, len(text))] == text[:80]
    finally:
        m.release()
