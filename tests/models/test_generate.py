"""Sampling, streaming, stop tokens, the Model facade with real tokenizers, and `orion generate`."""

from __future__ import annotations

import argparse
import io
import shutil

import numpy as np
import pytest

from orion.errors import InputError
from orion.models import Model, SamplingParams, load, reference, sample_next
from orion.models.tokenizers import GPT2Tokenizer

from ckpt_writers import write_hf_gpt2, write_llama2c_v0
from models_helpers import data_file, tiny_gpt2, tiny_llama, weights16


def test_sampling_rules():
    rng = np.random.default_rng(0)
    logits = np.array([1.0, 3.0, 2.0, -1.0, 2.9])
    greedy = SamplingParams(temperature=0)
    assert sample_next(logits, greedy) == 1
    assert sample_next(logits, SamplingParams(temperature=1.0, top_k=1), rng=rng) == 1
    assert sample_next(logits, SamplingParams(temperature=5.0, top_p=1e-6), rng=rng) == 1
    # repetition penalty (HF rule): the repeated best token loses to the runner-up
    assert sample_next(logits, SamplingParams(repetition_penalty=1.5), history=[1]) == 4
    neg = np.array([-1.0, -1.1])
    assert sample_next(neg, SamplingParams(repetition_penalty=2.0), history=[0]) == 1    # negative logits * p
    # seeds reproduce; top-k restricts the support; frequencies follow the softmax
    p = SamplingParams(temperature=1.0, seed=3)
    a = [sample_next(logits, p, rng=np.random.default_rng(7)) for _ in range(5)]
    b = [sample_next(logits, p, rng=np.random.default_rng(7)) for _ in range(5)]
    assert a == b
    draws = [sample_next(logits, SamplingParams(temperature=1.0, top_k=2), rng=rng) for _ in range(400)]
    assert set(draws) <= {1, 4}
    draws = np.array([sample_next(logits, SamplingParams(temperature=1.0), rng=rng) for _ in range(4000)])
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    freq = np.bincount(draws, minlength=5) / len(draws)
    assert np.abs(freq - probs).max() < 0.03
    # top-p keeps the smallest prefix reaching p: {1: 0.39, 4: 0.35} reach 0.7
    draws = [sample_next(logits, SamplingParams(temperature=1.0, top_p=0.7), rng=rng) for _ in range(400)]
    assert set(draws) == {1, 4}


def test_stream_stop_tokens_and_seeded_sampling():
    cfg = tiny_llama()
    w = weights16(cfg, seed=3, std=0.15)
    m = Model(cfg, w, device="sim", stop_tokens=[])
    prompt = [1, 20, 30]
    ref = reference.greedy(cfg, w, prompt, 10)
    s = m.stream(prompt, max_tokens=10)
    toks = [t.id for t in s]
    assert toks == ref and s.result.tokens == ref and s.result.stop_reason == "max_tokens"
    stop = ref[4]
    g = m.generate(prompt, max_tokens=10, stop_tokens=[stop])
    assert g.tokens == ref[:ref.index(stop) + 1] and g.stop_reason == "stop_token"
    a = m.generate(prompt, max_tokens=8, temperature=1.2, top_k=50, top_p=0.95, seed=11)
    b = m.generate(prompt, max_tokens=8, temperature=1.2, top_k=50, top_p=0.95, seed=11)
    c = m.generate(prompt, max_tokens=8, temperature=1.2, top_k=50, top_p=0.95, seed=12)
    assert a.tokens == b.tokens and a.tokens != c.tokens
    assert m.generate(prompt, max_tokens=0).tokens == []


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    """A tiny random GPT-2 with the real 50,257-token vocabulary, stored as a HF folder with its tokenizer."""
    d = tmp_path_factory.mktemp("gpt2-tiny")
    cfg = tiny_gpt2(vocab_size=50257, d_model=32, n_heads=2, d_ff=64, n_ctx=64)
    w = weights16(cfg, seed=9, std=0.3)
    write_hf_gpt2(d, cfg, w)
    shutil.copy(data_file("gpt2-vocab.json"), d / "vocab.json")
    shutil.copy(data_file("gpt2-merges.txt"), d / "merges.txt")
    return d, cfg, w


def test_model_with_gpt2_tokenizer_streams_text(gpt2_dir, tmp_path):
    d, cfg, w = gpt2_dir
    m = load(str(d), device="sim", cache=str(tmp_path))
    assert isinstance(m.tokenizer, GPT2Tokenizer)
    s = m.stream("Hello, world! 😀", max_tokens=12, temperature=0.9, seed=0, stop_tokens=[])
    pieces = [t.text for t in s]
    r = s.result
    assert r.prompt_tokens == [15496, 11, 995, 0] + m.tokenizer.encode(" 😀")
    tok = m.tokenizer
    # the streamed pieces are exactly the continuation of the prompt's text (held-back open UTF-8
    # sequences are flushed into result.text at the end)
    base = tok.decode(r.prompt_tokens)
    full = tok.decode(r.prompt_tokens + r.tokens)
    assert full.startswith(base) and r.text == full[len(base):]
    assert r.text.startswith("".join(pieces))
    assert str(r) == r.text and "tokens=" in repr(r)      # print(generation) prints the text
    ids = r.prompt_tokens
    assert m.generate(ids, max_tokens=6, stop_tokens=[]).tokens == reference.greedy(cfg, w, ids, 6)


def _cli(argv):
    from orion.cli.generate import add_generate_parser, cmd_generate
    p = argparse.ArgumentParser()
    add_generate_parser(p.add_subparsers())
    args = p.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    assert args.func is cmd_generate
    assert cmd_generate(args, out=out, err=err) == 0
    return out.getvalue(), err.getvalue()


def test_cli_generate_text(gpt2_dir, tmp_path):
    d, cfg, w = gpt2_dir
    out, err = _cli(["generate", "--model", str(d), "--prompt", "Once upon a time", "--max-tokens", "8",
                     "--device", "sim", "--cache-dir", str(tmp_path), "--stop-token", "-1"])
    tok = GPT2Tokenizer(str(d / "vocab.json"), str(d / "merges.txt"))
    ids = tok.encode("Once upon a time")
    assert out == "Once upon a time" + tok.decode(reference.greedy(cfg, w, ids, 8)) + "\n"
    assert "prefill" in err and "tok/s" in err and "decode" in err


def test_cli_generate_ids_for_models_without_tokenizer(tmp_path):
    cfg = tiny_llama(n_ctx=32)
    w = weights16(cfg, seed=2, std=0.15)
    write_llama2c_v0(tmp_path / "m.bin", cfg, {k: v.astype(np.float32) for k, v in w.items()})
    out, err = _cli(["generate", "--model", str(tmp_path / "m.bin"), "--prompt-ids", "1 7 9", "--max-tokens", "5",
                     "--device", "sim", "--cache-dir", str(tmp_path / "c"), "--stop-token", "-1"])
    assert [int(t) for t in out.split()] == reference.greedy(cfg, w, [1, 7, 9], 5)
    from orion import InputError
    from orion.cli.generate import add_generate_parser, cmd_generate
    p = argparse.ArgumentParser()
    add_generate_parser(p.add_subparsers())
    args = p.parse_args(["generate", "--model", str(tmp_path / "m.bin"), "--prompt", "words", "--device", "sim",
                         "--cache-dir", str(tmp_path / "c")])
    with pytest.raises(InputError, match="no tokenizer"):
        cmd_generate(args, out=io.StringIO(), err=io.StringIO())


def test_host_cache_mirror_catches_up_from_the_set_that_wrote():
    """Decode steps write only the running program set's caches; the host mirror (k_host / v_host) takes
    the positions from that set when read, when another set takes over (prefill -> decode -> a larger
    context bucket mid-generation), after a rollback, and before the sets are dropped (a new LoRA rank)."""
    cfg = tiny_llama()
    w = weights16(cfg)
    ids = [int(t) for t in np.random.default_rng(4).integers(1, cfg.vocab_size, 40)]
    m = Model(cfg, w, device="sim", ctx_buckets=[32, 64], prefill_buckets=[32])
    fresh = Model(cfg, w, device="sim", ctx_buckets=[64])
    try:
        eng, ref = m.engine, fresh.engine
        eng.reset(30)
        eng.prefill(ids[:20])                    # the S=32, T=32 set
        for t in ids[20:28]:
            eng.step(t)                          # the decode set writes positions 20..27
        eng.rollback(26)
        for t in ids[26:34]:
            eng.step(t)                          # position 32 leaves the T=32 bucket: a new set takes over
        assert eng.T == 64 and eng.pos == 34
        ref.reset(34)
        ref.prefill(ids[:34])
        eng.step(ids[34])
        ref.step(ids[34])
        eng.drop_program_sets()                  # what a LoRA rank change does: the text survives
        k, v = eng.k_host[:, :, :35], eng.v_host[:, :, :35]
        assert np.array_equal(k, ref.k_host[:, :, :35]) and np.array_equal(v, ref.v_host[:, :, :35])
        assert np.array_equal(eng.step(ids[35]), ref.step(ids[35]))
    finally:
        m.release()
        fresh.release()


def test_kv_cache_is_sized_for_the_call_not_for_n_ctx():
    """A config's n_ctx (128k for Llama 3.2) must not allocate a KV cache for 128k positions: the host
    mirror grows with the context bucket the generation needs."""
    cfg = tiny_llama(n_ctx=1 << 20)
    m = Model(cfg, weights16(cfg), device="sim", ctx_buckets=[64, 128])
    try:
        g = m.generate([1, 5, 9], max_tokens=8, stop_tokens=[])
        assert len(g.tokens) == 8
        assert m.engine.k_host.shape[2] == 64
        m.generate(list(range(1, 80)), max_tokens=4, stop_tokens=[])
        assert m.engine.k_host.shape[2] == 128
        want = reference.greedy(cfg, m.weights, [1, 5, 9], 8)
        assert m.generate([1, 5, 9], max_tokens=8, stop_tokens=[]).tokens == want
    finally:
        m.release()


def test_one_model_shared_by_threads_gives_each_the_answer_it_would_get_alone():
    """A Model used from two threads serialises its generations (each owns the KV cache
    for its duration); a second generation inside an unfinished stream of the same thread is refused."""
    import threading
    cfg = tiny_llama()
    m = Model(cfg, weights16(cfg), device="sim")
    prompts = [[1, 5, 9, 30], [1, 7], [1, 100, 200, 3, 4, 5], [1, 2, 3]]
    want = [m.generate(p, max_tokens=12, stop_tokens=[]).tokens for p in prompts]
    got: dict = {}

    def work(i):
        for _ in range(3):
            got.setdefault(i, []).append(m.generate(prompts[i], max_tokens=12, stop_tokens=[]).tokens)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(got[i] == [want[i]] * 3 for i in range(len(prompts)))
    s = m.stream([1, 5], max_tokens=5, stop_tokens=[])
    next(s)
    with pytest.raises(InputError, match="unfinished stream"):
        m.generate([1, 2], max_tokens=2)
    s.close()
    assert m.generate([1, 2], max_tokens=2, stop_tokens=[]).tokens == reference.greedy(cfg, m.weights, [1, 2], 2)
    m.release()
