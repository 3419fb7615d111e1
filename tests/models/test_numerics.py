"""Tiny random GPT-2 and Llama models through the simulator vs the float64 reference (orion.models.reference):
prefill logits at every position, every decode step, decode-with-cache vs full recompute, prefill
chunking, context-bucket growth, the device classifier, and no compiles per token."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from orion.models import Model, reference

from models_helpers import assert_logits_close, tiny_gpt2, tiny_llama, weights16


CASES = {
    "gpt2": lambda: tiny_gpt2(),
    "llama_gqa_untied": lambda: tiny_llama(),
    "llama_mha_tied": lambda: tiny_llama(n_kv_heads=4, tie_embeddings=True, d_ff=128),
}


def _ids(cfg, n, seed=0):
    return [int(t) for t in np.random.default_rng(seed).integers(0, cfg.vocab_size, n)]


@pytest.mark.parametrize("case", list(CASES))
def test_prefill_and_every_decode_step_vs_reference(case):
    cfg = CASES[case]()
    w = weights16(cfg, seed=1)
    ids = _ids(cfg, 40)
    ref = reference.forward(cfg, w, ids)
    m = Model(cfg, w, device="sim")
    full = m.logits(ids)                                   # one prefill (S bucket 64) over all 40 positions
    assert_logits_close(full, ref, what=f"{case} prefill")
    assert (full.argmax(1) == ref.argmax(1)).mean() >= 0.95
    eng = m.engine
    eng.reset(len(ids))
    first = eng.prefill(ids[:7])
    assert_logits_close(first, ref[6], what=f"{case} prefill of 7")
    compiles = orion.counters()["compiles"]
    for i in range(7, len(ids)):
        step = eng.step(ids[i])
        assert_logits_close(step, ref[i], what=f"{case} decode step at position {i}")
        # decode with the KV cache equals the full recompute by the prefill programs (same per-column
        # arithmetic; only the fp32 classifier summation may differ)
        np.testing.assert_allclose(step, full[i], atol=1e-4, rtol=0)
    assert orion.counters()["compiles"] == compiles, "decode steps must not compile"
    m.release()


def test_prefill_chunks_and_context_buckets_grow():
    cfg = tiny_llama(n_ctx=96)
    w = weights16(cfg, seed=2)
    ids = _ids(cfg, 70, seed=3)
    ref = reference.forward(cfg, w, ids)
    m = Model(cfg, w, device="sim", prefill_buckets=(16,), ctx_buckets=(32, 64))
    eng = m.engine
    eng.reset(20)                       # picks T = 32 ...
    assert eng.T == 32
    got = eng.prefill(ids[:40], all_logits=True)           # ... grows to 64; 3 chunks of S = 16
    assert eng.T == 64
    assert_logits_close(got, ref[:40], what="chunked prefill")
    for i in range(40, 70):                                # crosses into T = 96 (n_ctx)
        assert_logits_close(eng.step(ids[i]), ref[i], what=f"decode at {i}")
    assert eng.T == 96
    assert sorted(eng.sets) == [(16, 64), (16, 96)]
    m.release()


def test_device_classifier_chunks_match_cpu():
    cfg = tiny_gpt2()
    w = weights16(cfg, seed=4)
    ids = _ids(cfg, 12, seed=5)
    cpu = Model(cfg, w, device="sim").logits(ids)
    dev_model = Model(cfg, w, device="sim", classifier="device", classifier_chunk=100)
    dev = dev_model.logits(ids)
    assert len(dev_model.engine.cls_sets[16]) == 4          # 384 rows in chunks of <= 100
    ref = reference.forward(cfg, w, ids)
    assert_logits_close(dev, ref, what="device classifier")
    np.testing.assert_allclose(dev, cpu, atol=LOGIT_ATOL(ref))


def LOGIT_ATOL(ref):  # noqa: N802 - one fp16 rounding of the largest logit, plus slack
    return 4 * 2.0 ** -10 * float(np.abs(ref).max()) + 1e-3


def test_generate_greedy_equals_reference_and_programs_are_reused():
    cfg = tiny_gpt2()
    w = weights16(cfg, seed=6, std=0.15)
    m = Model(cfg, w, device="sim", stop_tokens=[])
    prompt = _ids(cfg, 5, seed=7)
    g = m.generate(prompt, max_tokens=12)
    assert g.tokens == reference.greedy(cfg, w, prompt, 12)
    assert g.stop_reason == "max_tokens" and g.decode_steps == 11
    n = m.engine.compiles
    m.generate(prompt, max_tokens=12)
    assert m.engine.compiles == n, "programs are compiled once per bucket and cached"


def test_tight_compile_budget_prefills_through_the_decode_set():
    cfg = tiny_gpt2()
    w = weights16(cfg, seed=8)
    ids = _ids(cfg, 40, seed=9)
    used, limit = orion.sim.compile_budget()
    orion.sim.set_compile_budget(used + cfg.n_layers + 2)         # room for one set of L + 1 stages only
    try:
        m = Model(cfg, w, device="sim", stop_tokens=[])
        g = m.generate(ids, max_tokens=4)
        assert sorted(m.engine.sets) == [(16, 64)]
    finally:
        orion.sim.set_compile_budget(limit)
    assert g.tokens == reference.greedy(cfg, w, ids, 4)
