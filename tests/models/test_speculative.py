"""Speculative decoding with prompt lookup: the same tokens as plain greedy decoding (stop tokens inside
accepted drafts, the token budget and the context limit included), fewer evals on repetitive text, and
the draft lookup itself."""

from __future__ import annotations

import os

import numpy as np
import pytest

from orion.errors import InputError
from orion.models import Model, load
from orion.models.speculative import lookup_draft

from models_helpers import tiny_gpt2, weights16

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")


def _gpt2(**kw):
    cfg = tiny_gpt2(**kw)
    return Model(cfg, weights16(cfg), device="sim", stop_tokens=[])


def _prompts(m, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for n in (3, 9, 17):
        p = [int(t) for t in rng.integers(3, m.config.vocab_size, n)]
        out.append(p + p)                     # repetitive: the lookup finds drafts
    return out


@pytest.mark.parametrize("name", ["gpt2", "llama3", "mistral", "qwen3"])
def test_prompt_lookup_equals_plain_greedy(name, tmp_path):
    m = _gpt2() if name == "gpt2" else load(os.path.join(FIXTURES, name), device="sim", cache=str(tmp_path))
    drafted = accepted = 0
    for p in _prompts(m):
        plain = m.generate(p, max_tokens=30, stop_tokens=[])
        spec = m.generate(p, max_tokens=30, stop_tokens=[], speculative="prompt-lookup")
        assert spec.tokens == plain.tokens and spec.stop_reason == plain.stop_reason == "max_tokens"
        assert spec.text == plain.text
        assert 0 <= spec.accepted <= spec.drafted and spec.decode_steps <= plain.decode_steps
        drafted, accepted = drafted + spec.drafted, accepted + spec.accepted
    assert drafted > 0


def test_fewer_evals_on_repetitive_output_and_stops_inside_drafts():
    m = _gpt2()
    p = _prompts(m)[1]
    plain = m.generate(p, max_tokens=40)
    spec = m.generate(p, max_tokens=40, speculative="prompt-lookup")
    assert spec.tokens == plain.tokens
    assert spec.tokens_per_eval > 2 and spec.acceptance_rate > 0.5      # this tiny model repeats itself
    stop = plain.tokens[-7]                                              # a token met inside an accepted draft
    a = m.generate(p, max_tokens=40, stop_tokens=[stop])
    b = m.generate(p, max_tokens=40, stop_tokens=[stop], speculative="prompt-lookup")
    assert b.tokens == a.tokens and b.stop_reason == a.stop_reason == "stop_token"


def test_context_limit_and_budget_equal_plain():
    m = _gpt2(n_ctx=32)
    p = _prompts(m)[1][:20]
    for n in (0, 1, 5, 40):
        plain = m.generate(p, max_tokens=n)
        spec = m.generate(p, max_tokens=n, speculative="prompt-lookup")
        assert spec.tokens == plain.tokens and spec.stop_reason == plain.stop_reason, n
    assert spec.stop_reason == "context"


def test_lookup_draft_length_adapts_to_acceptance():
    # LOOKUP_START drafts first, doubling while every one is kept (never past 15: one decode eval), halving
    # at a rejection (never below 1)
    from orion.models.speculative import LOOKUP_START, MAX_DRAFT, _LookupDrafter
    d = _LookupDrafter()
    history = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17] * 2 + [1, 2]
    sizes = []
    for kept in (True, True, True, False, False, False, False, False):
        draft, q = d.propose(history, MAX_DRAFT, None, None, None)
        assert q is None
        sizes.append(len(draft))
        d.keep(len(history), len(draft), len(draft) if kept else 0)
    assert LOOKUP_START == 4 and MAX_DRAFT == 15
    assert sizes == [4, 8, 15, 15, 7, 3, 1, 1]


def test_lookup_draft_and_refusals():
    assert lookup_draft([5, 6, 7, 8, 5, 6], 3) == [7, 8, 5]              # 2-gram (5, 6) seen before
    assert lookup_draft([1, 2, 3, 4], 3) == []                            # nothing recurs
    assert lookup_draft([9, 9, 9, 9, 9], 2) == [9, 9]                     # a run: the occurrence with 2 after it
    assert lookup_draft([9, 9, 9, 9], 2) == [9]                           # else the one followed by most
    assert lookup_draft([4, 1, 2, 3, 1, 2], 0) == []
    m = _gpt2()
    with pytest.raises(InputError, match="prompt-lookup"):
        m.generate([1, 2], speculative="draft")
    with pytest.raises(InputError, match="rollback"):
        m.engine.rollback(m.engine.pos + 1)


def test_cli_speculative_prints_the_plain_greedy_text(tmp_path):
    import argparse
    import io

    from orion.cli.generate import add_generate_parser, cmd_generate
    fx = os.path.join(FIXTURES, "llama3")
    p = argparse.ArgumentParser()
    add_generate_parser(p.add_subparsers())
    args = p.parse_args(["generate", "--model", fx, "--prompt", "the cat the cat the", "--max-tokens", "8",
                         "--device", "sim", "--cache-dir", str(tmp_path), "--speculative", "prompt-lookup"])
    out, err = io.StringIO(), io.StringIO()
    assert cmd_generate(args, out=out, err=err) == 0
    m = load(fx, device="sim", cache=str(tmp_path))
    assert out.getvalue() == "the cat the cat the" + m.generate("the cat the cat the", max_tokens=8).text + "\n"
    assert "tokens per eval" in err.getvalue() and "acceptance" in err.getvalue()
