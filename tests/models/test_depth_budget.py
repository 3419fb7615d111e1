"""Real models at their real depth within the ANE's compile budget (C05: ~119 compiles per
process, which the simulator enforces).

36-layer copies of every family fixture (tests/models/deep_models.py) do everything a user does, in ONE
budget window of 119 compiles: generate with fp16, int8, lut4 and int4 weights, generate_batch of 8
prompts, speculative decoding with the 2-layer fixture of the same family as the draft, a LoRA adapter
swap, Model.chat - the model's own compiles at most 60. That works because the middle stages share one
program with the weights as inputs (engine ``layers="shared"``), which computes bit for bit what the
baked per-layer programs compute; the compile plan is known before compiling, and a request the budget
cannot afford is refused before any compile.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import orion
from deep_models import FAMILIES, FIXTURES, make_deep, prompt_ids
from orion.errors import BudgetExceeded
from orion.lora import LoraConfig, init_adapter
from orion.models import load, reference

LIMIT = 119            # the device's per-process compile budget, as the simulator profile has it


@pytest.fixture
def device_budget():
    """This test's compiles counted against the real limit (the suite otherwise runs unlimited)."""
    orion.sim.reset_compile_budget()
    orion.sim.set_compile_budget(LIMIT)
    yield
    orion.sim.set_compile_budget(10 ** 9)


def _used() -> int:
    return orion.sim.compile_budget()[0]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_36_layer_model_does_everything_in_one_budget(family, tmp_path, device_budget):
    path = make_deep(family, str(tmp_path / "deep"))
    ids = prompt_ids(family)
    m = load(path, device="sim")
    draft = load(os.path.join(FIXTURES, family), device="sim")
    try:
        plan = m.compile_plan()
        assert plan["layers"] == "shared" and plan["per_set"] <= 6 and _used() == 0    # planning compiles nothing
        # fp16: logits within fp16 error of the float64 reference, greedy generation
        z = m.logits(ids)
        want = reference.forward(m.config, m.weights, ids)
        assert np.abs(z - want).max() < 0.05 * np.abs(want).max()
        alone = m.generate(ids, max_tokens=6, stop_tokens=[]).tokens
        # a batch of 8 prompts: each as it would run alone
        prompts = [ids[:n] for n in range(6, 14)]
        batch = m.generate_batch(prompts, max_tokens=4, stop_tokens=[[]] * 8)
        assert len(batch) == 8
        assert batch[-1].tokens == m.generate(prompts[-1], max_tokens=4, stop_tokens=[]).tokens
        # speculative decoding with the 2-layer draft of the same family: the same greedy tokens
        assert m.generate(ids, max_tokens=6, stop_tokens=[], speculative=draft, draft_k=4).tokens == alone
        # a LoRA adapter and a swap back to the base model
        targets = ["qkv", "down"] if family == "phi3" else ["q", "v", "down"]    # Phi-3 fuses q, k, v
        ad = init_adapter(m, LoraConfig(r=4, alpha=8, targets=targets), seed=1, b_std=0.05)
        m.set_adapter(ad)
        adapted = m.logits(ids)
        assert np.abs(adapted - z).max() > 1e-3                                    # the adapter acts
        before = m.engine.compiles
        m.set_adapter(None)
        assert np.array_equal(m.logits(ids), z) and m.engine.compiles == before    # swap: no compile
        m.set_adapter(ad)
        assert np.array_equal(m.logits(ids), adapted) and m.engine.compiles == before
        m.set_adapter(None)
        # chat through the tokenizer's template
        g = m.chat([{"role": "user", "content": "Tell me about a fox."}], max_tokens=4)
        assert isinstance(g.text, str)
        assert m.engine.compiles <= 60, m.engine.compiles
        assert _used() == m.engine.compiles + draft.engine.compiles <= LIMIT
    finally:
        m.release()
        draft.release()


@pytest.mark.parametrize("family", ["llama3", "gemma3", "qwen2"])
def test_compressed_36_layer_models_in_one_budget(family, tmp_path, device_budget):
    path = make_deep(family, str(tmp_path / "deep"))
    ids = prompt_ids(family)
    for scheme in ("int8", "lut4", "int4"):
        m = load(path, device="sim", quantize=scheme)
        try:
            c0 = _used()
            g = m.generate(ids, max_tokens=4, stop_tokens=[])
            assert len(g.tokens) == 4
            z = m.logits(ids)
            want = reference.forward(m.config, m.weights, ids)              # on the decoded weights
            # fp16 error over 36 random layers (measured 1.1-5.8 %: int4's decoded weights amplify most)
            assert np.abs(z - want).max() < 0.08 * np.abs(want).max()
            assert _used() - c0 == m.engine.compiles <= 60
        finally:
            m.release()
    assert _used() <= LIMIT


@pytest.mark.parametrize("family,quantize", [("qwen3", None), ("gemma3", None), ("llama3", "int4"), ("phi3", "lut4")])
def test_shared_layers_equal_baked_layers_bit_for_bit_at_depth(family, quantize, tmp_path):
    """The shared program (weights as inputs, compressed ones decoded on the host) computes exactly what
    the baked per-layer programs (convs, constexpr decoding) compute."""
    path = make_deep(family, str(tmp_path / "deep"), layers=12)
    ids = prompt_ids(family)
    out = {}
    for layers in ("baked", "shared"):
        m = load(path, device="sim", layers=layers, quantize=quantize)
        try:
            out[layers] = (m.logits(ids), m.generate(ids, max_tokens=5, stop_tokens=[]).tokens, m.engine.compiles)
        finally:
            m.release()
    assert np.array_equal(out["baked"][0], out["shared"][0]) and out["baked"][1] == out["shared"][1]
    assert out["shared"][2] < out["baked"][2]


def test_a_request_the_budget_cannot_afford_is_refused_before_compiling(tmp_path, device_budget):
    path = make_deep("llama3", str(tmp_path / "deep"), layers=12)
    m = load(path, device="sim", layers="baked")
    try:
        plan = m.compile_plan()
        assert plan["layers"] == "baked" and plan["per_set"] == 13 and plan["generate"] == 26
        orion.sim.set_compile_budget(10)     # not even the decode set alone (prompts would go through it)
        with pytest.raises(BudgetExceeded, match=r"needs 13 more compiles, 10 .* left.*layers='shared'") as e:
            m.generate(prompt_ids("llama3"), max_tokens=2)
        assert e.value.constraint == "C05" and _used() == 0 and m.engine.compiles == 0
    finally:
        m.release()


def test_repr_and_info_show_the_plan(tmp_path, capsys):
    from orion.cli import main
    path = make_deep("qwen2", str(tmp_path / "deep"))
    m = load(path, device="sim")
    try:
        assert "compiles" not in repr(m)                     # the repr builds nothing
        m.compile_plan()
        assert "compiles: 3 per program set (shared layers), generate 6, batch +3, 0 so far" in repr(m)
    finally:
        m.release()
    assert main(["info", "--model", path]) == 0
    out = capsys.readouterr().out
    assert "layers: shared" in out and "compiles per program set: 3" in out and "first generation" in out


def test_a_failure_while_capturing_layer_weights_releases_the_shared_program(tmp_path, monkeypatch):
    """A set that fails while capturing a layer's weights leaves no program loaded: every compile of it is
    matched by a release by the time the error reaches the caller."""
    from orion.models import engine as engine_mod
    path = make_deep("qwen3", str(tmp_path / "deep"), layers=6)
    m = load(path, device="sim", layers="shared")
    real, calls = engine_mod.capture_layer_weights, []

    def flaky(*a, **k):
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError("no surface for layer 3")
        return real(*a, **k)
    monkeypatch.setattr(engine_mod, "capture_layer_weights", flaky)
    c0 = orion.counters()
    try:
        with pytest.raises(MemoryError):
            m.generate(prompt_ids("qwen3"), max_tokens=1)
        c1 = orion.counters()
        assert c1["compiles"] > c0["compiles"] and c1["releases"] - c0["releases"] == c1["compiles"] - c0["compiles"]
    finally:
        m.release()
