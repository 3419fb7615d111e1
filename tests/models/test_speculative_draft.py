"""Speculative decoding with a draft model: greedy output equal to plain greedy decoding token for token
(drafts partly accepted, stop tokens, budgets, the context limits of target and draft), the draft's KV
cache kept in step with the accepted text (a draft with the target's own weights is always right), the
vocabulary check, and the CLI's --draft."""

from __future__ import annotations

import argparse
import io
import os

import numpy as np
import pytest

from orion.errors import InputError
from orion.models import Model, load

from models_helpers import tiny_gpt2, tiny_llama, weights16

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")


def _noisy(w, noise, seed=5):
    rng = np.random.default_rng(seed)
    return {k: (v.astype(np.float32) + noise * np.std(v) * rng.standard_normal(v.shape)).astype(np.float16)
            for k, v in w.items()}


@pytest.fixture(scope="module")
def gpt2_pair():
    """A tiny GPT-2 target and a draft of the same shape with perturbed weights (agrees often, not always)."""
    cfg = tiny_gpt2()
    w = weights16(cfg)
    return Model(cfg, w, device="sim", stop_tokens=[]), Model(cfg, _noisy(w, 0.3), device="sim", stop_tokens=[])


def _prompts(V, seed=0):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, V, n)] for n in (1, 6, 19)]


def test_greedy_with_a_draft_equals_plain_greedy(gpt2_pair):
    m, d = gpt2_pair
    drafted = accepted = 0
    for k in (1, 4, 15):
        for p in _prompts(m.config.vocab_size):
            plain = m.generate(p, max_tokens=24)
            spec = m.generate(p, max_tokens=24, speculative=d, draft_k=k)
            assert spec.tokens == plain.tokens and spec.stop_reason == plain.stop_reason == "max_tokens", (k, p)
            assert spec.draft_evals == spec.drafted and spec.decode_steps <= plain.decode_steps   # k drafts: k evals
            assert spec.tokens_per_eval == (len(spec.tokens) - 1) / spec.decode_steps
            drafted, accepted = drafted + spec.drafted, accepted + spec.accepted
    assert 0.2 * drafted < accepted < drafted         # rejections and rollbacks of both caches happened


def test_two_threads_with_target_and_draft_swapped_both_finish(gpt2_pair):
    # each generation owns both models; locks taken in one global order, so swapped roles cannot deadlock
    import threading
    m, d = gpt2_pair
    p = _prompts(m.config.vocab_size)[1]
    want = {0: m.generate(p, max_tokens=12).tokens, 1: d.generate(p, max_tokens=12).tokens}
    got, errors = {}, []

    def run(i, target, draft):
        try:
            for _ in range(5):
                got[i] = target.generate(p, max_tokens=12, speculative=draft, draft_k=4).tokens
        except BaseException as e:         # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(0, m, d), daemon=True), threading.Thread(target=run, args=(1, d, m), daemon=True)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in ts), "speculation with swapped roles deadlocked"
    assert not errors and got == want


def test_a_draft_of_another_family_and_size():
    """Only the vocabulary is shared: a 1-layer GPT-2 drafts for a 2-layer Llama."""
    cfg = tiny_llama()
    m = Model(cfg, weights16(cfg), device="sim", stop_tokens=[])
    dcfg = tiny_gpt2(n_layers=1, d_model=32, n_heads=2, d_ff=64)
    d = Model(dcfg, weights16(dcfg, seed=3), device="sim", stop_tokens=[])
    for p in _prompts(cfg.vocab_size, seed=1):
        assert m.generate(p, max_tokens=20, speculative=d, draft_k=3).tokens == m.generate(p, max_tokens=20).tokens


def test_the_draft_cache_stays_in_step_with_the_accepted_text(gpt2_pair):
    """A draft with the target's own weights proposes exactly the target's tokens, and its cache holds the
    K/V of the accepted text, equal to the target's (also after rounds that kept every draft)."""
    m, _ = gpt2_pair
    twin = Model(m.config, m.weights, device="sim", stop_tokens=[])
    for k in (2, 15):
        for p in _prompts(m.config.vocab_size):
            spec = m.generate(p, max_tokens=30, speculative=twin, draft_k=k)
            assert spec.accepted == spec.drafted > 0, (k, p)
            assert spec.decode_steps == -(-(len(spec.tokens) - 1) // (k + 1))     # k + 1 tokens per eval
            n = twin.engine.pos                  # the draft's cache: a prefix of the text, all but the last round
            assert len(p) + len(spec.tokens) - k - 2 <= n <= m.engine.pos
            for a, b in ((twin.engine.k_host, m.engine.k_host), (twin.engine.v_host, m.engine.v_host)):
                assert np.array_equal(a[:, :, :n], b[:, :, :n]), (k, p)
            assert spec.tokens == m.generate(p, max_tokens=30).tokens


def test_stops_budgets_and_context_limits_equal_plain(gpt2_pair):
    m, d = gpt2_pair
    p = _prompts(m.config.vocab_size)[1]
    plain = m.generate(p, max_tokens=30)
    for stop in (plain.tokens[3], plain.tokens[-5]):
        a = m.generate(p, max_tokens=30, stop_tokens=[stop])
        b = m.generate(p, max_tokens=30, stop_tokens=[stop], speculative=d, draft_k=4)
        assert b.tokens == a.tokens and b.stop_reason == a.stop_reason == "stop_token"
    small = Model(tiny_gpt2(n_ctx=32), m.weights, device="sim", stop_tokens=[])
    short_draft = Model(tiny_gpt2(n_ctx=24), d.weights, device="sim", stop_tokens=[])   # ends before the target
    for n in (0, 1, 2, 5, 40):
        for draft in (d, short_draft):
            a = small.generate(p, max_tokens=n)
            b = small.generate(p, max_tokens=n, speculative=draft, draft_k=5)
            assert b.tokens == a.tokens and b.stop_reason == a.stop_reason, n
    assert b.stop_reason == "context"


def test_incompatible_drafts_are_refused(gpt2_pair, tmp_path):
    m, d = gpt2_pair
    other = Model(tiny_gpt2(vocab_size=256), weights16(tiny_gpt2(vocab_size=256)), device="sim")
    with pytest.raises(InputError, match="256 tokens but the target .* has 384"):
        m.generate([1, 2], speculative=other)
    with pytest.raises(InputError, match="target itself"):
        m.generate([1, 2], speculative=m)
    for k in (0, 16):
        with pytest.raises(InputError, match="draft_k must be in 1..15"):
            m.generate([1, 2], speculative=d, draft_k=k)
    short = Model(tiny_gpt2(n_ctx=16), d.weights, device="sim")
    with pytest.raises(InputError, match="context of 16"):
        m.generate(list(range(3, 20)), speculative=short)
    with pytest.raises(InputError, match="speculative must be"):
        m.generate([1, 2], speculative="draft")
    for spec in (None, "prompt-lookup"):
        with pytest.raises(InputError, match="draft_k"):
            m.generate([1, 2], speculative=spec, draft_k=3)
    qwen3, phi3 = (load(os.path.join(FIXTURES, n), device="sim", cache=str(tmp_path)) for n in ("qwen3", "phi3"))
    assert qwen3.config.vocab_size == phi3.config.vocab_size                 # same size, other tokenizer
    with pytest.raises(InputError, match="tokenize differently"):
        qwen3.generate("Hi", speculative=phi3)
    bare = Model(phi3.config, phi3.weights, device="sim")                     # no tokenizer to compare
    with pytest.raises(InputError, match="no tokenizer"):
        phi3.generate("Hi", speculative=bare)


def test_cli_draft_prints_the_plain_greedy_text(tmp_path):
    from orion.cli.generate import add_generate_parser, cmd_generate
    fx, draft = os.path.join(FIXTURES, "llama3"), os.path.join(FIXTURES, "llama_linear")   # same tokenizer
    p = argparse.ArgumentParser()
    add_generate_parser(p.add_subparsers())
    args = p.parse_args(["generate", "--model", fx, "--prompt", "Once upon a time", "--max-tokens", "12",
                         "--device", "sim", "--cache-dir", str(tmp_path), "--draft", draft, "--draft-k", "3"])
    out, err = io.StringIO(), io.StringIO()
    assert cmd_generate(args, out=out, err=err) == 0
    m = load(fx, device="sim", cache=str(tmp_path))
    assert out.getvalue() == "Once upon a time" + m.generate("Once upon a time", max_tokens=12).text + "\n"
    assert "tokens per eval" in err.getvalue() and "draft evals" in err.getvalue()
    args = p.parse_args(["generate", "--model", fx, "--draft", draft, "--speculative", "prompt-lookup"])
    from orion.cli.common import UsageError
    with pytest.raises(UsageError, match="either"):          # a contradictory pair of flags: exit 2, before loading
        cmd_generate(args, out=out, err=err)
