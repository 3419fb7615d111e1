"""Batched generation (``Model.generate_batch``): sequences of different lengths share decode evals, one
per column, with their own positions, stop conditions and sampling parameters, and each output equals
the same prompt generated alone - greedy token for token, sampling draw for draw (same seed). More
prompts than columns exercise continuous batching (a finished column takes the next prompt)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from orion.errors import InputError
from orion.models import Model, load
from orion.models.batch import BatchStats

from models_helpers import tiny_gpt2, weights16

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
LENGTHS = (3, 9, 17, 1, 25, 5, 12)
MAX_TOKENS = [8, 12, 5, 10, 3, 7, 9]


def _prompts(m, seed=0):
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(3, m.config.vocab_size, n)] for n in LENGTHS]


def _model(name, tmp_path):
    if name == "gpt2":
        cfg = tiny_gpt2()
        return Model(cfg, weights16(cfg), device="sim", stop_tokens=[])
    return load(os.path.join(FIXTURES, name), device="sim", cache=str(tmp_path))


class _LogitsRecorder:
    """Records the logits every sampling decision sees: per single generation (``alone()`` after each
    ``m.generate``) and per sequence of a batch (``batched[i]``), so that tests compare them bit for bit
    (greedy tokens alone would hide last-bit differences)."""

    def __init__(self, monkeypatch):
        from orion.models import batch, stream
        self._seen: list = []
        self.batched: dict[int, list] = {}
        sample_next = stream.sample_next
        consume = batch._Seq.consume

        def recording(logits, *a):
            self._seen.append(np.array(logits, np.float32))
            return sample_next(logits, *a)

        def consuming(seq, logits):
            self.batched.setdefault(seq.index, []).append(np.array(logits, np.float32))
            return consume(seq, logits)

        monkeypatch.setattr(stream, "sample_next", recording)
        monkeypatch.setattr(batch._Seq, "consume", consuming)

    def alone(self) -> np.ndarray:
        got, self._seen = np.stack(self._seen), []
        return got

    def assert_same(self, i: int, alone: np.ndarray) -> None:
        b = np.stack(self.batched[i])
        assert alone.shape == b.shape and np.array_equal(alone.view(np.uint32), b.view(np.uint32)), i


@pytest.mark.parametrize("name", ["gpt2", "llama3", "mistral", "gemma3", "qwen3", "phi3"])
def test_greedy_batch_equals_each_prompt_alone(name, tmp_path, monkeypatch):
    m = _model(name, tmp_path)
    prompts = _prompts(m)
    rec = _LogitsRecorder(monkeypatch)
    st = BatchStats()
    gens = m.generate_batch(prompts, max_tokens=MAX_TOKENS, max_batch=3, stop_tokens=[[]] * len(prompts), stats=st)
    for i, (p, n, g) in enumerate(zip(prompts, MAX_TOKENS, gens)):
        solo = m.generate(p, max_tokens=n, stop_tokens=[])
        assert g.tokens == solo.tokens and g.stop_reason == solo.stop_reason == "max_tokens"
        assert g.prompt_tokens == p and g.decode_steps == solo.decode_steps
        rec.assert_same(i, rec.alone())
    # evals were shared: 3 columns busy while prompts wait, fewer evals than decode steps
    assert max(st.columns_used) == 3
    assert st.decode_evals < sum(g.decode_steps for g in gens)
    assert st.generated == sum(MAX_TOKENS)


def test_sampling_and_stops_per_sequence_equal_alone(tmp_path):
    """Each sequence keeps its own temperature / top-k / seed and its own stop tokens."""
    m = _model("llama3", tmp_path)
    prompts = _prompts(m, seed=1)[:5]
    alone = [m.generate(p, max_tokens=10, stop_tokens=[]) for p in prompts]
    stops = [[alone[0].tokens[4]], [], [alone[2].tokens[1]], None, []]   # two stop early, one the model's
    kw = dict(max_tokens=10, temperature=[0.0, 0.9, 0.0, 1.3, 0.7], top_k=[0, 5, 0, 0, 20], seed=[0, 1, 2, 3, 4],
              stop_tokens=stops)
    gens = m.generate_batch(prompts, max_batch=16, **kw)
    for i, (p, g) in enumerate(zip(prompts, gens)):
        solo = m.generate(p, **{k: (v[i] if isinstance(v, list) else v) for k, v in kw.items()})
        assert g.tokens == solo.tokens and g.stop_reason == solo.stop_reason, i
        assert g.text == solo.text
    assert gens[0].stop_reason == "stop_token" and len(gens[0].tokens) <= 5


def test_batch_options_are_checked(tmp_path):
    m = _model("gpt2", tmp_path)
    with pytest.raises(InputError, match="max_batch"):
        m.generate_batch([[1]], max_batch=17)
    with pytest.raises(InputError, match="3 values for 2 prompts"):
        m.generate_batch([[1], [2]], temperature=[0.0, 0.1, 0.2])
    with pytest.raises(InputError, match="unknown option"):
        m.generate_batch([[1]], beams=2)
    assert m.generate_batch([]) == []


def test_device_classifier_batch_equals_alone():
    """With the classifier as programs, batches use the 16-column classifier set (no per-width compiles)."""
    cfg = tiny_gpt2()
    m = Model(cfg, weights16(cfg), device="sim", stop_tokens=[], classifier="device")
    prompts = _prompts(m)[:4]
    gens = m.generate_batch(prompts, max_tokens=6, max_batch=3)
    assert [g.tokens for g in gens] == [m.generate(p, max_tokens=6).tokens for p in prompts]
    assert set(m.engine.cls_sets) <= {16, 32}            # decode width and the prompts' prefill bucket


def test_lora_adapter_swaps_reach_the_batch_programs():
    """The batch set is staged with the current adapter on every call: a swap after the first batch
    (same slots, no compile) changes the batched outputs exactly as it changes single generations."""
    from orion import lora as L
    from models_helpers import tiny_llama
    cfg = tiny_llama(n_kv_heads=4, d_ff=128)
    m = Model(cfg, weights16(cfg, seed=3, std=0.15), device="sim", stop_tokens=[])
    a, b = (L.init_adapter(cfg, L.LoraConfig(r=4, alpha=8, targets="q,v,o,w2"), seed=s, b_std=0.3) for s in (7, 8))
    prompts = _prompts(m)[:3]
    outs = []
    for ad in (a, b, None):
        m.set_adapter(ad)
        got = [g.tokens for g in m.generate_batch(prompts, max_tokens=6)]
        assert got == [m.generate(p, max_tokens=6).tokens for p in prompts]
        outs.append(got)
    assert outs[0] != outs[1] != outs[2]


def test_buckets_of_both_softmax_kinds_equal_alone(monkeypatch):
    """n_ctx = 96: a sequence alone uses the context bucket 64 (softmax kernel) or 96 (a non-power-of-two
    softmax, decomposed, C21; the two differ in the last bits); a batch mixing both gives every sequence
    the very logits it has alone."""
    cfg = tiny_gpt2(n_ctx=96)
    m = Model(cfg, weights16(cfg), device="sim", stop_tokens=[])
    prompts = _prompts(m)[:4]
    n_tok = [30, 8, 50, 6]                       # totals 33, 17, 67, 7: buckets 64, 64, 96, 64
    assert sorted({m.engine.ctx_bucket(len(p) + n) for p, n in zip(prompts, n_tok)}) == [64, 96]
    rec = _LogitsRecorder(monkeypatch)
    alone = []
    for p, n in zip(prompts, n_tok):
        m.generate(p, max_tokens=n)
        alone.append(rec.alone())
    m.generate_batch(prompts, max_tokens=n_tok)
    for i, a in enumerate(alone):
        rec.assert_same(i, a)


def test_padded_region_caches_equal_alone(monkeypatch):
    """head_dim 8: the V regions [1, 16 * kv_heads, R, 8] are too small a surface and get a padded last
    axis (C04); the host writes go through the padded views and every sequence keeps its logits."""
    from models_helpers import tiny_llama
    cfg = tiny_llama(d_model=32, n_heads=4, n_kv_heads=2, d_ff=64)
    m = Model(cfg, weights16(cfg), device="sim", stop_tokens=[])
    prompts = _prompts(m)[:3]
    rec = _LogitsRecorder(monkeypatch)
    alone = []
    for p in prompts:
        m.generate(p, max_tokens=6)
        alone.append(rec.alone())
    m.generate_batch(prompts, max_tokens=6)
    for i, a in enumerate(alone):
        rec.assert_same(i, a)
    v = m.engine.batch_sets[64][1][1].inputs["v_cache"]
    assert v.shape == (1, 32, 64, 8) and v.mil_shape[3] > 8
