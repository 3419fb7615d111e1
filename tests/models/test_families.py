"""Every model family against transformers: the committed fixtures (scripts/make_model_fixtures.py) hold
transformers' fp32 logits of every position and its greedy ids; orion must match them on the simulator.

Tolerances: all-position logits within 0.05 of max |logit| (fp16 programs, one rounding per op, fp32
accumulation); argmax equal wherever transformers' top-2 margin exceeds 0.01 of max |logit|; greedy ids
(16 tokens) equal. The float64 reference (models/reference.py, written independently of the graph
builders) must agree to 1e-5: it pins the math, the programs pin fp16 execution.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from orion.models import load, reference
from orion.models.loaders import read_checkpoint

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
NAMES = sorted(n for n in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, n, "reference.npz")))
EXPECTED_TYPES = {"llama3": "llama", "smollm2": "llama", "llama_linear": "llama", "llama_legacy_keys": "llama",
                  "qwen2": "qwen2", "qwen3": "qwen3", "mistral": "mistral", "gemma3": "gemma3_text",
                  "gemma3_legacy_keys": "gemma3_text", "phi3": "phi3"}


def _ref(name):
    return np.load(os.path.join(FIXTURES, name, "reference.npz"))


def test_every_family_has_a_fixture():
    assert set(EXPECTED_TYPES) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_float64_reference_equals_transformers(name):
    ck = read_checkpoint(os.path.join(FIXTURES, name))
    assert ck.config.model_type == EXPECTED_TYPES[name]
    r = _ref(name)
    z = reference.forward(ck.config, ck.weights, r["ids"].tolist())
    scale = np.abs(r["logits"]).max()
    assert np.abs(z - r["logits"]).max() / scale < 1e-5


@pytest.mark.parametrize("name", NAMES)
def test_programs_match_transformers_logits_and_greedy(name, tmp_path):
    r = _ref(name)
    ids = r["ids"].tolist()
    m = load(os.path.join(FIXTURES, name), device="sim", cache=str(tmp_path))
    try:
        z = m.logits(ids)
        want = r["logits"]
        assert z.shape == want.shape
        scale = np.abs(want).max()
        assert np.abs(z - want).max() / scale < 0.05
        top2 = np.sort(want, axis=-1)[:, -2:]
        clear = (top2[:, 1] - top2[:, 0]) > 0.01 * scale
        assert (z.argmax(-1) == want.argmax(-1))[clear].all()
        g = m.generate(ids, max_tokens=16, stop_tokens=[])
        assert g.tokens == r["greedy"].tolist()
    finally:
        m.release()


def test_sliding_window_prompt_is_longer_than_the_window():
    """The sliding-window fixtures only test the window if the prompt exceeds it."""
    for name in ("mistral", "gemma3"):
        cfg = read_checkpoint(os.path.join(FIXTURES, name)).config
        assert cfg.sliding_window is not None and len(_ref(name)["ids"]) > 2 * cfg.sliding_window


def test_device_classifier_applies_softcap_like_the_cpu_one(tmp_path):
    name = "gemma3"
    ids = _ref(name)["ids"].tolist()[:20]
    cpu = load(os.path.join(FIXTURES, name), device="sim", cache=str(tmp_path))
    dev = load(os.path.join(FIXTURES, name), device="sim", cache=str(tmp_path), classifier="device",
               classifier_chunk=128)
    try:
        a, b = cpu.logits(ids), dev.logits(ids)
        assert np.abs(a).max() <= cpu.config.final_softcap
        assert np.abs(a - b).max() < 0.02 * np.abs(a).max()
        assert {len(p) for p in dev.engine.cls_sets.values()} == {-(-cpu.config.vocab_size // 128)}
    finally:
        cpu.release()
        dev.release()
