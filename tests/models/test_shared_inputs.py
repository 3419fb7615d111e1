"""A shared-layer program's inputs are all as big as its largest weight input (C12: 32 MB each for a 1B model).
Two things keep that from multiplying: a layer whose cache is much smaller than that holds it in a host array of
the cache's own size, copied into the program's own surface before each eval (stages.cache_copied_in; one bound
surface per layer was 480 MB of a 1B model's 16 layers for 8 MB of cache), and the program sets share their
shared programs' input surfaces other than weights (x, q, mask, RoPE tables, cache). Both compute exactly what
a surface per layer and per set computes: logits, greedy tokens, the cache, through the step chain and the
Python loop."""

from __future__ import annotations

import numpy as np
import pytest
from deep_models import make_deep, prompt_ids
from orion.models import load
from orion.models import stages as stages_mod
from orion.models.memory import memory_plan
from orion.models.stages import LayerStage


def _run(path, family, use_chain, **kw):
    m = load(path, device="sim", layers="shared", **kw)
    m.engine.use_chain = use_chain
    ids = prompt_ids(family, 37)                          # a prefill set's program, then the decode set's
    z = m.logits(ids)
    toks = m.generate(ids, max_tokens=6, stop_tokens=[]).tokens
    eng = m.engine
    return m, z, toks, np.array(eng.k_host[:, :, :eng.pos]), np.array(eng.v_host[:, :, :eng.pos])


def _layer_stages(m) -> dict:
    return {k: [st for st in sts if isinstance(st, LayerStage)] for k, sts in m.engine.sets.items()}


def _other_cache_bytes(m) -> int:
    """The caches of the stages that are not turns of a shared program (the last layer's own program)."""
    seen = {}
    for sts in m.engine.sets.values():
        for st in sts:
            for one in [] if isinstance(st, LayerStage) else getattr(st, "parts", [st]):
                for b in one.inputs.values():
                    if b.name in stages_mod.CACHE_INPUTS:
                        s = one.prog.input_surface(b.mil_name)
                        seen[s.view("uint8").__array_interface__["data"][0]] = s.alloc_size
    return sum(seen.values())


@pytest.mark.parametrize("family,use_chain,quantize", [("llama3", True, None), ("qwen3", False, None),
                                                       ("gemma3", True, "int8")])
def test_caches_held_on_the_host_compute_what_a_bound_surface_per_layer_computes(family, use_chain, quantize,
                                                                                 tmp_path, monkeypatch):
    path = make_deep(family, str(tmp_path / "deep"), layers=6)
    monkeypatch.setattr(stages_mod, "CACHE_COPY_RATIO", 1)     # always (the fixtures are small)
    a = _run(path, family, use_chain, quantize=quantize)
    monkeypatch.setattr(stages_mod, "CACHE_COPY_RATIO", 10**9)             # never: a surface per layer
    b = _run(path, family, use_chain, quantize=quantize)
    sa, sb = _layer_stages(a[0]), _layer_stages(b[0])
    assert all(st.host_caches and not st.caches for sts in sa.values() for st in sts)
    assert all(st.caches and not st.host_caches for sts in sb.values() for st in sts)
    assert np.array_equal(a[1].view(np.uint32), b[1].view(np.uint32)) and a[2] == b[2]
    assert np.array_equal(a[3].view(np.uint16), b[3].view(np.uint16))
    assert np.array_equal(a[4].view(np.uint16), b[4].view(np.uint16))
    # in no more bytes (the fixtures' caches are their programs' largest inputs: the bytes they save at 1B are in
    # benchmarks/RESULTS.md; test_a_layers_cache_costs_its_own_size_once_for_both_sets pins the size)
    held, bound = (r[0].memory()["kv_cache"] - _other_cache_bytes(r[0]) for r in (a, b))
    assert 0 < held <= bound


def test_a_layers_cache_costs_its_own_size_once_for_both_sets(tmp_path, monkeypatch):
    monkeypatch.setattr(stages_mod, "CACHE_COPY_RATIO", 1)
    path = make_deep("llama3", str(tmp_path / "deep"), layers=6)
    m, *_ = _run(path, "llama3", True)
    sets = _layer_stages(m)
    assert len(sets) == 2
    a, b = sets.values()
    eng = m.engine
    for x, y in zip(a, b):                                  # prefill and decode of one bucket: one host cache
        (hx,), (hy,) = x.host_caches.values(), y.host_caches.values()
        assert hx is hy and hx.shape[0] == 2 * m.config.kv_dim and hx.shape[1] >= eng.T
        assert np.array_equal(x.cache["k_cache"][:, :eng.pos], eng.k_host[x.layer - 1, :, :eng.pos])
        assert np.array_equal(x.cache["v_cache"][:, :eng.pos], eng.v_host[x.layer - 1, :, :eng.pos])
    layers = len(a)
    mem = m.memory()
    assert mem["kv_cache"] == layers * a[0].host_caches["kv_cache"].nbytes + _other_cache_bytes(m)
    plan = memory_plan(m, n_prompt=37, n_new=6)
    assert plan["kv_cache"] == mem["kv_cache"] and plan["program_surfaces"] == mem["program_surfaces"]


def test_the_sets_share_their_shared_programs_input_surfaces(tmp_path, monkeypatch):
    monkeypatch.setattr(stages_mod, "CACHE_COPY_RATIO", 1)
    path = make_deep("llama3", str(tmp_path / "deep"), layers=6)
    m, *_ = _run(path, "llama3", True)
    bases = [sts[0].base for sts in _layer_stages(m).values()]
    assert len(bases) == 2 and bases[0].prog is not bases[1].prog

    def address(base, name):
        return base.prog.input_surface(name).view("uint8").__array_interface__["data"][0]

    names = [b.mil_name for b in bases[0].cp.io_plan.inputs.values() if b.kind != "weight"]
    assert {"x", "q_attn", "mask", "kv_cache"} <= {b.name for b in bases[0].cp.io_plan.inputs.values()}
    for name in names:
        assert address(bases[0], name) == address(bases[1], name), name
