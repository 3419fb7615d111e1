"""A step's layers run as one native call (models/chain.py) wherever the stages allow it, and compute exactly
what the Python loop over the stages computes: logits, greedy tokens and the KV cache, for shared and baked
layers, compressed weights, LoRA swaps (the chain is rebuilt when a layer's surfaces are rebound); the loop
runs for Gemma 3 (per-layer masks on its shared program, split baked stages)."""

from __future__ import annotations

import numpy as np
import pytest
from deep_models import make_deep, prompt_ids
from orion.lora import LoraConfig, init_adapter
from orion.models import load


def _run(path, family, use_chain, **kw):
    m = load(path, device="sim", **kw)
    try:
        m.engine.use_chain = use_chain
        ids = prompt_ids(family)
        z = m.logits(ids)
        toks = m.generate(ids, max_tokens=6, stop_tokens=[]).tokens
        eng = m.engine
        k = np.array(eng.k_host[:, :, :eng.pos]) if hasattr(eng, "k_host") else None
        used = [c for _, c in eng._chains.values() if c is not None]
        return z, toks, k, used
    finally:
        m.release()


@pytest.mark.parametrize("family,layers,quantize", [("llama3", "shared", None), ("qwen3", "shared", "int8"),
                                                    ("phi3", "shared", "lut4"), ("smollm2", "baked", None),
                                                    ("mistral", "shared", None), ("gemma3", "shared", None),
                                                    ("gemma3", "baked", None)])
def test_the_chain_computes_what_the_python_loop_computes(family, layers, quantize, tmp_path):
    path = make_deep(family, str(tmp_path / "deep"), layers=8)
    a = _run(path, family, True, layers=layers, quantize=quantize)
    b = _run(path, family, False, layers=layers, quantize=quantize)
    assert np.array_equal(a[0].view(np.uint32), b[0].view(np.uint32)) and a[1] == b[1]
    if a[2] is not None:
        assert np.array_equal(a[2].view(np.uint16), b[2].view(np.uint16))
    assert not b[3]
    # the loop runs for Gemma 3: its shared program takes a sliding-window mask on some layers and the global
    # one on others, and its baked stages are split in parts (C18)
    assert bool(a[3]) == (family != "gemma3")


def test_lora_swaps_rebuild_the_chain(tmp_path):
    path = make_deep("llama3", str(tmp_path / "deep"), layers=8)
    ids = prompt_ids("llama3")
    got = {}
    for use in (True, False):
        m = load(path, device="sim", layers="shared")
        try:
            m.engine.use_chain = use
            ad = init_adapter(m, LoraConfig(r=4, alpha=8, targets=["q", "v", "down"]), seed=1, b_std=0.05)
            seq = []
            for adapter in (ad, None, ad):
                m.set_adapter(adapter)
                seq.append((m.logits(ids).tobytes(), m.generate(ids, max_tokens=4, stop_tokens=[]).tokens))
            got[use] = seq
            assert any(c is not None for _, c in m.engine._chains.values()) == use
        finally:
            m.release()
    assert got[True] == got[False]
    assert got[True][0] != got[True][1] and got[True][0] == got[True][2]   # the adapter acts; swaps back exactly
