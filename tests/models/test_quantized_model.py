"""Models with compressed weights (``Model(..., quantize=...)`` / ``orion.models.load(path, quantize=...)``):
the stage programs bake the layers' linears as constexpr ops, hold <= 0.55x (int8) / <= 0.30x (4-bit)
of the fp16 model's weight bytes, compute what the float64 reference computes on the weights the ops
produce, and agree with the fp16 model's top-1 token as measured below (tiny random Llama, d=64, d_ff=172:
int8 100%, lut6 85%, lut4 72%, int4 72% of 39 positions; KL 0.001 / 0.016 / 0.23 / 0.24 nats)."""

from __future__ import annotations

import numpy as np
import pytest

from orion.errors import CompileError, InputError
from orion.models import Model, reference
from orion.quant import QuantizedArray, quality_report

from models_helpers import assert_logits_close, data_file, tiny_gpt2, tiny_llama, weights16

# scheme -> (max weight_bytes / fp16, min top-1 agreement with fp16 on the tiny Llama)
BOUNDS = {"int8": (0.55, 0.95), "lut6": (0.45, 0.75), "lut4": (0.30, 0.6), "int4": (0.30, 0.6)}


@pytest.fixture(scope="module")
def tiny():
    cfg = tiny_llama()
    w = weights16(cfg)
    ids = [int(t) for t in np.random.default_rng(0).integers(0, cfg.vocab_size, 40)]
    base = Model(cfg, w, device="sim")
    return cfg, w, ids, base.logits(ids), base.weight_bytes


@pytest.mark.parametrize("scheme", sorted(BOUNDS))
def test_quantized_tiny_llama(tiny, scheme):
    cfg, w, ids, ref16, fp16_bytes = tiny
    m = Model(cfg, w, device="sim", quantize=scheme)
    assert isinstance(m.weights["layers.0.w1"], QuantizedArray) and not isinstance(m.weights["tok_emb"], QuantizedArray)
    got = m.logits(ids)
    # what the programs compute = the float64 reference on the weights the constexpr ops produce
    assert_logits_close(got, reference.forward(cfg, m.weights, ids), what=scheme)
    max_ratio, min_top1 = BOUNDS[scheme]
    assert m.weight_bytes <= max_ratio * fp16_bytes
    report = quality_report(ref16[:-1], got[:-1], np.array(ids[1:]))
    assert report.top1_match >= min_top1, str(report)
    stage_mil = m.engine.sets[next(iter(m.engine.sets))][1]
    mils = [cp.mil for cp in stage_mil.programs]
    assert any("constexpr_" in t for t in mils)


def test_unknown_scheme_is_an_input_error():
    cfg = tiny_llama()
    with pytest.raises(InputError, match="quantize must be one of"):
        Model(cfg, weights16(cfg), device="sim", quantize="lut5")


def test_gpt2_quantize_is_refused_not_ignored():
    # GPT-2's linears are h.N.*: quantize once matched none of them and ran the fp16 model silently
    cfg = tiny_gpt2()
    with pytest.raises(InputError, match="no layers.N linears"):
        Model(cfg, weights16(cfg), device="sim", quantize="int8")


def test_stories260k_lut4_generates():
    """d_ff = 172 divides neither LUT groups of 16 nor int4 blocks of 32: groups / blocks of 43 are used."""
    from orion.models import load
    m = load(data_file("stories260K.bin"), device="sim", quantize="lut4")
    assert m.weights["layers.0.w1"].quant.group_size == 43        # [172, 64]: 172 = 4 x 43
    assert m.weights["layers.0.w2"].quant.group_size == 16        # [64, 172]: the default divides 64
    g = m.generate([1], max_tokens=8, stop_tokens=[])
    assert len(g.tokens) == 8


def test_lora_adapter_on_a_quantized_base(tiny):
    """An adapter as program inputs on top of compressed base weights (QLoRA-style inference): the programs
    compute the reference with the adapter merged into the weights the constexpr ops produce."""
    from orion import lora as L
    cfg, w, ids, _, _ = tiny
    ad = L.init_adapter(cfg, L.LoraConfig(r=4, alpha=8, targets="q,v,w2"), seed=1, b_std=0.1)
    for d in (ad.A, ad.B):
        for k in d:
            d[k] = d[k].astype(np.float16).astype(np.float32)
    m = Model(cfg, w, device="sim", quantize="lut4")
    m.set_adapter(ad)
    got = m.logits(ids[:24])
    ref = reference.forward(cfg, L.merge({k: np.asarray(v) for k, v in m.weights.items()}, ad), ids[:24])
    err = assert_logits_close(got, ref, what="lut4 base + adapter")
    base = reference.forward(cfg, m.weights, ids[:24])
    assert np.abs(base - ref).max() > 20 * err                  # the adapter is visible in the outputs
    assert any("constexpr_lut_to_dense" in cp.mil for st in next(iter(m.engine.sets.values())) for cp in st.programs)


def test_stage_split_coarsest_that_fits(tiny, monkeypatch):
    """A stage over the weight budget (C18: int8 linears carry three weight tensors each) runs as the
    coarsest split whose parts all compile - attention and MLP in one program, the next layer's q/k/v in
    another - and a split that still overflows falls back to the next; logits are the same bits either way."""
    from orion.models import llama
    from orion.models.stages import SplitStage

    cfg, w, ids, _, _ = tiny
    m = Model(cfg, w, device="sim", quantize="int8")
    got = m.logits(ids)
    stages = next(iter(m.engine.sets.values()))
    assert [len(s.parts) if isinstance(s, SplitStage) else 1 for s in stages] == [1] + [2] * (cfg.n_layers - 1) + [1]
    assert len(stages[1].parts[0].inputs) > len(stages[1].parts[1].inputs)   # body (caches, mask) + qkv
    monkeypatch.setattr(llama, "SPLITS", (("attn", "ffn", "qkv"),))
    finer = Model(cfg, w, device="sim", quantize="int8")
    assert np.array_equal(finer.logits(ids), got)
    assert len(next(iter(finer.engine.sets.values()))[1].parts) == 3
    # body + qkv refused for a stage (as a bigger body would be): the 3-part split takes over
    real = llama.stage_graph

    def budget(cfg_, w_, stage, S, T, part=None, **kw):
        g = real(cfg_, w_, stage, S, T, part=part, **kw)
        if part == "body" and stage == 1:
            e = CompileError("too many weight tensors (test)")
            e.constraint = "C18"
            raise e
        return g

    monkeypatch.setattr(llama, "SPLITS", (("body", "qkv"), ("attn", "ffn", "qkv")))
    monkeypatch.setattr(llama, "stage_graph", budget)
    mixed = Model(cfg, w, device="sim", quantize="int8")
    assert np.array_equal(mixed.logits(ids), got)
    assert len(next(iter(mixed.engine.sets.values()))[1].parts) == 3
