"""Shared-layer programs with compressed weights keep each layer's weights compressed (in the simulator kernels'
form) and decode them into the program's own weight surfaces before each of the layer's evals (models/streamed.py,
``stream_weights``, on by default for compressed weights): exactly the bits of an fp16 copy of every layer in
surfaces of its own - logits, greedy tokens, KV cache, through the step chain and the Python loop, batched
generation and LoRA adapters - at the compressed size instead of the fp16 one."""

from __future__ import annotations

import numpy as np
import pytest
from deep_models import make_deep, prompt_ids
from orion.errors import InputError
from orion.lora import LoraConfig, init_adapter
from orion.models import load
from orion.models.streamed import native_weight
from orion.quant import QuantizedArray, palettize, quantize_blockwise, quantize_int8


def _run(path, family, use_chain=True, adapter=False, **kw):
    m = load(path, device="sim", layers="shared", **kw)
    try:
        m.engine.use_chain = use_chain
        if adapter:
            m.set_adapter(init_adapter(m, LoraConfig(r=4, alpha=8, targets=["q", "v", "down"]), seed=1, b_std=0.05))
        ids = prompt_ids(family)
        z = m.logits(ids)
        toks = m.generate(ids, max_tokens=6, stop_tokens=[]).tokens
        eng = m.engine
        k = np.array(eng.k_host[:, :, :eng.pos])
        return z, toks, k, m.memory(), eng.streaming
    finally:
        m.release()


@pytest.mark.parametrize("family,quantize,use_chain", [("llama3", "int8", True), ("llama3", "lut4", False),
                                                       ("qwen3", "int4", True), ("gemma3", "int8", False)])
def test_streamed_layers_compute_what_per_layer_surfaces_compute(family, quantize, use_chain, tmp_path):
    path = make_deep(family, str(tmp_path / "deep"), layers=8)
    a = _run(path, family, use_chain, quantize=quantize)                       # the default: streamed
    b = _run(path, family, use_chain, quantize=quantize, stream_weights=False)
    assert a[4] and not b[4]
    assert np.array_equal(a[0].view(np.uint32), b[0].view(np.uint32)) and a[1] == b[1]
    assert np.array_equal(a[2].view(np.uint16), b[2].view(np.uint16))
    # the layers hold their compressed weights instead of fp16 surfaces (the few-KB fed vectors stay)
    assert a[3]["layer_weights_streamed"] > 0 == b[3]["layer_weights_streamed"]
    assert a[3]["layer_weight_surfaces"] < b[3]["layer_weight_surfaces"] / 4
    assert a[3]["layer_weights_streamed"] < b[3]["layer_weight_surfaces"]


def test_an_adapter_on_streamed_layers_computes_what_it_does_on_surfaces(tmp_path):
    path = make_deep("llama3", str(tmp_path / "deep"), layers=8)
    a = _run(path, "llama3", adapter=True, quantize="int8")
    b = _run(path, "llama3", adapter=True, quantize="int8", stream_weights=False)
    assert np.array_equal(a[0].view(np.uint32), b[0].view(np.uint32)) and a[1] == b[1]


def test_an_adapter_on_layers_read_in_place_computes_what_it_does_on_surfaces(tmp_path):
    path, ids, got = _wide(tmp_path), list(range(3, 23)), []
    for stream in (True, False):
        m = load(path, device="sim", layers="shared", quantize="int8", stream_weights=stream)
        try:
            m.set_adapter(init_adapter(m, LoraConfig(r=4, alpha=8, targets=["q", "v", "down"]), seed=1, b_std=0.05))
            got.append((m.logits(ids), m.generate(ids, max_tokens=5, stop_tokens=[]).tokens))
            assert any(lw.panels for lw in m.engine._layer_surf.values()) == stream
        finally:
            m.release()
    assert np.array_equal(got[0][0].view(np.uint32), got[1][0].view(np.uint32)) and got[0][1] == got[1][1]


@pytest.mark.parametrize("wide", [False, True])          # weights decoded before each eval / read in place
def test_batched_generation_streams_alike(wide, tmp_path):
    path = _wide(tmp_path) if wide else make_deep("llama3", str(tmp_path / "deep"), layers=8)
    prompts = [[3 + i % 300 for i in prompt_ids("llama3", n)] for n in (5, 9, 7)]
    got = []
    for stream in (True, False):
        m = load(path, device="sim", layers="shared", quantize="int8", stream_weights=stream)
        try:
            got.append([g.tokens for g in m.generate_batch(prompts, max_tokens=5, stop_tokens=[[]] * len(prompts))])
            assert any(lw.panels for lw in m.engine._layer_surf.values()) == (wide and stream)
        finally:
            m.release()
    assert got[0] == got[1]


def test_auto_streams_compressed_weights_only(tmp_path):
    path = make_deep("llama3", str(tmp_path / "deep"), layers=8)
    assert not load(path, device="sim", layers="shared").engine.streaming
    assert load(path, device="sim", layers="shared", quantize="int8").engine.streaming
    assert not load(path, device="sim", layers="shared", quantize="int8", stream_weights=False).engine.streaming
    with pytest.raises(InputError, match="stream_weights"):
        load(path, device="sim", stream_weights="yes").engine


# -- the native form: the constexpr op's values in a weight input's column panels ----------------------------

SCHEMES = {"int8": lambda w: quantize_int8(w), "uint8": lambda w: quantize_int8(w, symmetric=False),
           "lut4": lambda w: palettize(w, 4, group_size=16), "lut4_rows": lambda w: palettize(w, 4, group_size=1),
           "lut6": lambda w: palettize(w, 6, group_size=48), "int4": lambda w: quantize_blockwise(w, 4, block_size=8),
           "uint4": lambda w: quantize_blockwise(w, 4, block_size=8, symmetric=False)}


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("width,ld", [(16, 16), (32, 32), (64, 64), (32, 384)])
def test_native_weight_fills_panels_with_the_ops_values(scheme, width, ld):
    w = (np.random.default_rng(0).standard_normal((192, 80)) * 0.05).astype(np.float16)
    q = SCHEMES[scheme](w)
    cw = native_weight(QuantizedArray(q))
    P = 192 // width
    dst = np.full((P, 80, ld), np.float16(7), np.float16)
    cw.panels_into(dst, width)
    want = q.dequantize().reshape(P, width, 80).transpose(0, 2, 1)
    assert np.array_equal(dst[..., :width].view(np.uint16), want.view(np.uint16))
    assert (dst[..., width:] == 7).all()                                 # a padded row's tail is left alone
    assert cw.nbytes < w.nbytes


@pytest.mark.parametrize("scheme,rows", [("int8", 2040), ("lut4", 2048)])
def test_a_weight_too_big_to_stay_cached_is_written_past_the_cache_with_the_same_values(scheme, rows):
    """From 8 MB on panels_into writes whole rows with non-temporal stores (a 1B model's 32 MB inputs cannot stay
    in cache until the eval reads them); the values are the op's, and (int8, 2040 rows) a last partial panel and a
    padded row's tail are as the small path leaves them."""
    w = (np.random.default_rng(1).standard_normal((rows, 2048)) * 0.05).astype(np.float16)
    q = SCHEMES[scheme](w)
    cw = native_weight(QuantizedArray(q))
    for ld in (64, 72):
        P = -(-rows // 64)
        dst = np.full((P, 2048, ld), np.float16(7), np.float16)
        assert dst.nbytes >= 8 << 20
        cw.panels_into(dst, 64)
        want = np.zeros((P * 64, 2048), np.float16)
        want[:rows] = q.dequantize()
        want = want.reshape(P, 64, 2048).transpose(0, 2, 1)
        got = dst[..., :64].copy()
        got[-1, :, rows - (P - 1) * 64:] = 0                              # past the weight's rows: left alone
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16))
        assert (dst[-1, :, rows - (P - 1) * 64:64] == 7).all() and (dst[..., 64:] == 7).all()


def test_native_weight_refuses_what_it_cannot_hold():
    w = (np.random.default_rng(0).standard_normal((64, 32)) * 0.05).astype(np.float16)
    cw = native_weight(QuantizedArray(quantize_int8(w)))
    with pytest.raises(ValueError, match="dst must be"):
        cw.panels_into(np.zeros((2, 32, 16), np.float16), 32)           # a row shorter than the panel
    with pytest.raises(ValueError, match="width"):
        cw.panels_into(np.zeros((2, 32, 32), np.float16), 24)
    assert native_weight(w) is None                                      # an fp16 weight is not compressed
    from orion import _native
    with pytest.raises(ValueError, match="codes must hold"):
        _native.compressed_weight("shift_scale", np.zeros(10, np.uint8), 64, 32, 8, True, 1, 1,
                                  np.zeros(0, np.float16), np.ones(64, np.float32), np.zeros(0, np.float32))
    with pytest.raises(ValueError, match="lut must hold"):
        _native.compressed_weight("lut", np.zeros(64 * 32, np.uint8), 64, 32, 4, False, 16, 1,
                                  np.zeros(3, np.float16), np.zeros(0, np.float32), np.zeros(0, np.float32))


def test_program_sets_share_the_surfaces_layers_decode_into(tmp_path):
    from orion.models.stages import LayerStage
    path = make_deep("llama3", str(tmp_path / "deep"), layers=8)
    m = load(path, device="sim", layers="shared", quantize="int8")
    m.generate(prompt_ids("llama3", 20), max_tokens=3, stop_tokens=[])
    bases = list({id(st.base): st.base for sts in m.engine.sets.values() for st in sts
                  if isinstance(st, LayerStage)}.values())
    assert len(bases) == 2                                   # the prefill and the decode program
    first = bases[0].own_surfaces
    assert first and all(b.own_surfaces.keys() == first.keys() and
                         all(b.own_surfaces[k] is first[k] for k in first) for b in bases)
    assert bases[0].fill_state is bases[1].fill_state       # one record of whose weights they hold


# -- where the simulator reads the compressed weights themselves ----------------------------------------------

def _wide(tmp_path) -> str:
    """A llama whose shared program's weight inputs are not padded (each over the minimum surface): the layers'
    streamed weights are read through panel surfaces (the tiny fixtures' padded inputs are decoded instead)."""
    from ckpt_writers import write_hf_llama
    from models_helpers import tiny_llama, weights16
    cfg = tiny_llama(d_model=128, n_heads=4, n_kv_heads=2, d_ff=384, n_layers=6)
    write_hf_llama(str(tmp_path / "wide"), cfg, {k: v.astype(np.float32) for k, v in weights16(cfg, seed=1).items()})
    return str(tmp_path / "wide")


@pytest.mark.parametrize("quantize,use_chain", [("int8", True), ("lut4", False), ("int4", True)])
def test_layers_read_their_compressed_weights_in_place(quantize, use_chain, tmp_path):
    from orion.models.memory import memory_plan
    path = _wide(tmp_path)
    m = load(path, device="sim", layers="shared", quantize=quantize)
    try:
        m.engine.use_chain = use_chain
        plan = memory_plan(m, n_prompt=20, n_new=6)
        ids = list(range(3, 23))
        z = m.logits(ids)
        toks = m.generate(ids, max_tokens=6, stop_tokens=[]).tokens
        mem = m.memory()
        layers = list(m.engine._layer_surf.values())
        assert layers and all(lw.panels and lw.panels.keys() == lw.streamed.keys() for lw in layers)
        assert all(s.resident_bytes == 0 for lw in layers for s in lw.panels.values())       # never written
        bases = {id(st.base): st.base for sts in m.engine.sets.values() for st in sts if hasattr(st, "weights")}
        own = [s for b in bases.values() for s in b.own_surfaces.values()]
        assert own and not any(s.view("uint8", [s.alloc_size]).any() for s in own)   # zeroed after the capture
        assert {k: plan[k] for k in ("layer_weight_surfaces", "layer_weights_streamed", "program_surfaces")} == \
            {k: mem[k] for k in ("layer_weight_surfaces", "layer_weights_streamed", "program_surfaces")}
    finally:
        m.release()
    m = load(path, device="sim", layers="shared", quantize=quantize, stream_weights=False)
    try:
        m.engine.use_chain = use_chain
        assert np.array_equal(z.view(np.uint32), m.logits(ids).view(np.uint32))
        assert toks == m.generate(ids, max_tokens=6, stop_tokens=[]).tokens
        assert not any(lw.panels for lw in m.engine._layer_surf.values())
    finally:
        m.release()


@pytest.mark.parametrize("wide", [False, True])          # weights decoded before each eval / read in place
def test_another_program_sets_capture_takes_the_checked_layers_as_they_are(wide, tmp_path, monkeypatch):
    """A layer's streamed inputs are staged and their decode checked by the first program set's capture; another
    set's capture of the same layer (same compressed weights, same places in the same panels) stages them no more
    and checks nothing again - and computes the same (the tests above, against fp16 copies, run both sets)."""
    from orion.compiler.program import CompiledProgram
    path = _wide(tmp_path) if wide else make_deep("llama3", str(tmp_path / "deep"), layers=8)
    m = load(path, device="sim", layers="shared", quantize="int8")
    staged = []
    real_set = CompiledProgram.set_weights
    monkeypatch.setattr(CompiledProgram, "set_weights", lambda self, **kw: staged.append((self, set(kw))) or
                        real_set(self, **kw))
    try:
        eng = m.engine
        eng.program_set(32, 64)
        layers = {i: lw for i, lw in eng._layer_surf.items()}
        assert layers and all(lw.checked and lw.checked.keys() == lw.streamed.keys() for lw in layers.values())
        first = len(staged)
        eng.program_set(16, 64)
        second = staged[first:]
        assert len(second) == len(layers)                         # one capture a layer
        for cp, names in second:
            io = cp.io_plan
            known = {n for n, dw in io.dynamic.items() if io.inputs[dw.input_key].mil_name in layers[1].checked}
            assert known and not names & known                   # the streamed weights: not staged again
        sets = [[st for st in sts if hasattr(st, "weights")] for sts in eng.sets.values()]
        assert len(sets) == 2 and all(a.weights.checked == b.weights.checked for a, b in zip(*sets))
        assert all(a.weights.streamed.keys() == b.weights.streamed.keys() for a, b in zip(*sets))
    finally:
        m.release()
