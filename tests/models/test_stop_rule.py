"""One stop rule (orion.models.stream._Output) for plain, speculative and batched generation: a change to it
reaches all three, so they cannot drift apart."""

from __future__ import annotations

from orion.models import Model, stream

from models_helpers import tiny_gpt2, weights16


def test_plain_speculative_and_batched_generation_share_the_stop_rule(monkeypatch):
    cfg = tiny_gpt2()
    m = Model(cfg, weights16(cfg), device="sim", stop_tokens=[])
    prompt = [5, 6, 7, 5, 6, 7]
    ends = stream._Output.ends

    def ends_after_three(out):                   # a rule only this test has: three tokens, reason "test"
        if len(out.gen.tokens) >= 3:
            out.gen.stop_reason = "test"
            return True
        return ends(out)

    monkeypatch.setattr(stream._Output, "ends", ends_after_three)
    runs = {"plain": m.generate(prompt, max_tokens=20),
            "speculative": m.generate(prompt, max_tokens=20, speculative="prompt-lookup"),
            "batched": m.generate_batch([prompt, prompt[:4]], max_tokens=20)[0]}
    assert {k: (len(g.tokens), g.stop_reason) for k, g in runs.items()} == {k: (3, "test") for k in runs}
    assert runs["speculative"].tokens == runs["plain"].tokens == runs["batched"].tokens
