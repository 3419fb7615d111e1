"""The sampler's cached numpy forward (train/sample.py) equals the float64 reference's logits on every
family fixture, fed in pieces (the KV cache, per-layer RoPE and sliding windows across pieces)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from orion.models import reference
from orion.train.model import load_pretrained
from orion.train.sample import Generator, generate

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
FAMILIES = sorted(n for n in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, n, "config.json")))


@pytest.mark.parametrize("name", FAMILIES)
def test_cached_forward_equals_the_reference(name):
    cfg, p = load_pretrained(os.path.join(FIXTURES, name))
    ids = [int(i) for i in np.random.default_rng(0).integers(3, cfg.vocab_size, 21)]   # > every fixture's window
    want = reference.llama_forward(cfg, p, ids)
    gen = Generator(cfg, p)
    got = [gen.feed(ids[:9])]
    got += [gen.feed([t]) for t in ids[9:12]]
    got.append(gen.feed(ids[12:]))
    for pos, z in zip([8, 9, 10, 11, 20], got):
        np.testing.assert_allclose(z, want[pos], rtol=1e-4, atol=1e-4 * np.abs(want[pos]).max(), err_msg=str(pos))


def test_generate_stops_at_any_stop_id():
    cfg, p = load_pretrained(os.path.join(FIXTURES, "qwen3"))
    free = generate(cfg, p, [5, 6, 7], 6)
    assert len(free) == 6
    assert generate(cfg, p, [5, 6, 7], 6, stop_id={free[2], 99999}) == free[:free.index(free[2])]
