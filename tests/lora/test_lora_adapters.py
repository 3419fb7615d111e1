"""LoRA adapters as program inputs (inference): outputs vs the float64 reference with the adapter merged,
merged weights == adapter-as-input, hot swaps A -> B -> none with zero compiles/loads, binding by name
(q and v adapters of equal shapes, different values), PEFT files (names, config, HF row orders), and
typed errors for bad adapters.

Tolerance: the stage programs vs the float64 reference, as in tests/models (LOGIT_RTOL = 8 fp16 ulps of the
largest logit; each linear with an adapter adds two fp16 matmuls and one add). Base weights and adapters
are fp16-exact and alpha/r is a power of two, so the program holds exactly what the reference uses.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))

from models_helpers import assert_logits_close, tiny_gpt2, tiny_llama, weights16  # noqa: E402

import orion  # noqa: E402
from orion import lora as L  # noqa: E402
from orion.ir import Graph, ops  # noqa: E402
from orion.models import Model, reference  # noqa: E402


def _ids(cfg, n, seed=0):
    return [int(t) for t in np.random.default_rng(seed).integers(0, cfg.vocab_size, n)]


def _adapter(cfg, targets, r=4, alpha=8, seed=1, b_std=0.1, **kw):
    """An adapter with non-zero B, rounded to fp16 (what the programs hold)."""
    ad = L.init_adapter(cfg, L.LoraConfig(r=r, alpha=alpha, targets=targets, **kw), seed=seed, b_std=b_std)
    for d in (ad.A, ad.B):
        for k in d:
            d[k] = d[k].astype(np.float16).astype(np.float32)
    return ad


def _ref(cfg, w, ad, ids):
    w64 = {k: np.asarray(v, np.float64) for k, v in w.items()}
    return reference.forward(cfg, L.merge(w64, ad) if ad is not None else w64, ids)


# ------------------------------------------------------------------------------------------ compiler
def test_lora_linear_composite_binds_by_name_and_swaps_without_compiles():
    """Two adapted linears whose A/B inputs have identical shapes (a slot mix-up would go unnoticed by
    shape checks): the outputs must follow each adapter's own values, before and after a swap."""
    rng = np.random.default_rng(0)
    d, r, S = 64, 8, 512
    W = {k: (rng.standard_normal((d, d)) * 0.1).astype(np.float16) for k in "qv"}
    ab = {k: ((rng.standard_normal((r, d)) * 0.2).astype(np.float16),
              (rng.standard_normal((d, r)) * 0.2).astype(np.float16)) for k in "qv"}
    g = Graph("lora2")
    x = g.input("x", (1, d, 1, S))
    for k in "qv":
        a, b = ab[k]
        g.output(k, ops.lora_linear(x, g.weight(f"w{k}", W[k]), g.weight(f"w{k}_lora_a", a, dynamic=True),
                                    g.weight(f"w{k}_lora_b", b, dynamic=True), scale=2.0))
    cp = orion.compile(g, device="sim")
    names = [s.name for s in cp.program.inputs]
    assert names == sorted(names) and {"wq_lora_a", "wq_lora_b", "wv_lora_a", "wv_lora_b"} <= set(names)  # C13
    sizes = {s.nbytes for s in cp.program.inputs}
    assert len(sizes) > 1          # x and the A/B surfaces differ in size: the runtime allocates uniformly (C12)
    X = rng.standard_normal((1, d, 1, S)).astype(np.float32)
    xs = X[0, :, 0].astype(np.float64)

    def want(k, a, b):
        return W[k].astype(np.float64) @ xs + 2.0 * b.astype(np.float64) @ (a.astype(np.float64) @ xs)

    out = cp(x=X)
    for k in "qv":
        ref = want(k, *ab[k])
        np.testing.assert_allclose(out[k][0, :, 0], ref, atol=4e-3 * np.abs(ref).max())
        other = want(k, *ab["v" if k == "q" else "q"])
        assert np.abs(out[k][0, :, 0] - other).max() > 20 * 4e-3 * np.abs(ref).max()   # a mix-up would show
    c0 = orion.counters()
    cp.set_weights(wq_lora_a=ab["v"][0], wq_lora_b=ab["v"][1], wv_lora_a=ab["q"][0], wv_lora_b=ab["q"][1])
    out = cp(x=X)
    c1 = orion.counters()
    assert c1["compiles"] == c0["compiles"] and c1["loads"] == c0["loads"]
    for k, src in (("q", "v"), ("v", "q")):
        ref = want(k, *ab[src])
        np.testing.assert_allclose(out[k][0, :, 0], ref, atol=4e-3 * np.abs(ref).max())
    cp.release()


def test_lora_branch_transposed_matches_numpy():
    rng = np.random.default_rng(1)
    d_in, d_out, r, S = 48, 80, 4, 16
    a = (rng.standard_normal((r, d_in)) * 0.3).astype(np.float16)
    b = (rng.standard_normal((d_out, r)) * 0.3).astype(np.float16)
    g = Graph("lora_t")
    y = g.input("y", (1, d_out, 1, S))
    g.output("dx", ops.lora_branch(y, g.weight("a", a, dynamic=True), g.weight("b", b, dynamic=True), transpose=True))
    cp = orion.compile(g, device="sim")
    Y = rng.standard_normal((1, d_out, 1, S)).astype(np.float32)
    ref = a.astype(np.float64).T @ (b.astype(np.float64).T @ Y[0, :, 0])
    np.testing.assert_allclose(cp(y=Y)["dx"][0, :, 0], ref, atol=4e-3 * np.abs(ref).max())
    with pytest.raises(orion.GraphError, match="rank"):
        ops.lora_branch(y, g.weight("a2", a), g.weight("b2", b[:, :2]))
    cp.release()


# ------------------------------------------------------------------------------------------ models
CASES = {
    "llama_qv": (lambda: tiny_llama(n_kv_heads=4, d_ff=128), "q,v"),
    "llama_gqa_all": (lambda: tiny_llama(), "all-linear"),
    "gpt2_all": (lambda: tiny_gpt2(), ["c_attn", "c_proj", "c_fc"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_adapter_logits_vs_float64_reference_and_merged_weights(case):
    make, targets = CASES[case]
    cfg = make()
    w = weights16(cfg, seed=1)
    ad = _adapter(cfg, targets)
    ids = _ids(cfg, 24)
    ref = _ref(cfg, w, ad, ids)
    base_ref = _ref(cfg, w, None, ids)
    m = Model(cfg, w, device="sim")
    m.set_adapter(ad)
    assert m.adapter is ad
    got = m.logits(ids)
    err = assert_logits_close(got, ref, what=f"{case} with adapter")
    assert np.abs(base_ref - ref).max() > 20 * err, "test adapter too weak to tell adapter from base"
    # merged weights (baked) give the same outputs as the adapter as program inputs
    merged = Model(cfg, L.merge(w, ad), device="sim")
    assert_logits_close(merged.logits(ids), got, what=f"{case} merged vs adapter-as-input")
    un = L.unmerge(L.merge({k: v.astype(np.float32) for k, v in w.items()}, ad), ad)
    for k in w:
        np.testing.assert_allclose(un[k], w[k], atol=1e-6)
    merged.release()
    m.release()


def test_q_and_v_adapters_are_not_mixed_up():
    """q and v of one stage program have identical A/B shapes; the reference with the two adapters
    exchanged must be far from the program's output (so a binding mix-up would fail)."""
    cfg = tiny_llama(n_kv_heads=4, d_ff=128)
    w = weights16(cfg, seed=4)
    ad = _adapter(cfg, "q,v", seed=5, b_std=0.15)
    swapped = ad.copy()
    for i in range(cfg.n_layers):
        q, v = f"layers.{i}.wq", f"layers.{i}.wv"
        swapped.A[q], swapped.A[v] = ad.A[v], ad.A[q]
        swapped.B[q], swapped.B[v] = ad.B[v], ad.B[q]
    ids = _ids(cfg, 20, seed=2)
    m = Model(cfg, w, device="sim")
    m.set_adapter(ad)
    got = m.logits(ids)
    err = assert_logits_close(got, _ref(cfg, w, ad, ids), what="q/v adapters")
    assert np.abs(got - _ref(cfg, w, swapped, ids)).max() > 10 * max(err, 1e-3)
    m.release()


def test_hot_swap_a_then_b_then_none_generates_like_the_reference():
    cfg = tiny_llama(n_kv_heads=4, d_ff=128)
    w = weights16(cfg, seed=3, std=0.15)
    a = _adapter(cfg, "q,v,o,w2", r=4, alpha=8, seed=7, b_std=0.3)
    b = _adapter(cfg, "q,v", r=2, alpha=4, seed=8, b_std=0.4)          # smaller rank, fewer targets: same slots
    prompt, n = [1, 20, 30], 8
    m = Model(cfg, w, device="sim", stop_tokens=[])
    m.set_adapter(a)
    assert m.generate(prompt, max_tokens=n).tokens == reference.greedy(cfg, L.merge(w, a), prompt, n)
    c0 = orion.counters()
    t = time.perf_counter()
    m.set_adapter(b)
    swap_s = time.perf_counter() - t
    gb = m.generate(prompt, max_tokens=n).tokens
    m.set_adapter(None)
    g0 = m.generate(prompt, max_tokens=n).tokens
    base_logits = m.logits(prompt)
    m.set_adapter(a)
    ga = m.generate(prompt, max_tokens=n).tokens
    c1 = orion.counters()
    assert c1["compiles"] == c0["compiles"] and c1["loads"] == c0["loads"], "a swap must not compile or load"
    assert c1["weight_writes"] > c0["weight_writes"]
    assert gb == reference.greedy(cfg, L.merge(w, b), prompt, n)
    assert g0 == reference.greedy(cfg, w, prompt, n)
    assert ga == reference.greedy(cfg, L.merge(w, a), prompt, n)
    assert len({tuple(gb), tuple(g0), tuple(ga)}) == 3, "adapters too weak to change the generation"
    # None stages zeros: exactly the base model's programs' outputs
    plain = Model(cfg, w, device="sim")
    np.testing.assert_array_equal(base_logits, plain.logits(prompt))
    assert swap_s < 0.5
    plain.release()
    m.release()


def test_slots_grow_once_and_rank_reservation():
    cfg = tiny_llama(n_kv_heads=4, d_ff=128)
    w = weights16(cfg, seed=6)
    ids = _ids(cfg, 16, seed=9)
    m = Model(cfg, w, device="sim")
    small = _adapter(cfg, "q", r=2, alpha=2, seed=1)
    m.set_adapter(small, rank=8, targets="q,k,v")          # reserve: rank 8 on q, k, v
    assert_logits_close(m.logits(ids), _ref(cfg, w, small, ids), what="reserved slots")
    c0 = orion.counters()
    big = _adapter(cfg, "k,v", r=8, alpha=16, seed=2)
    m.set_adapter(big)                                      # fits the reservation: no compile
    assert_logits_close(m.logits(ids), _ref(cfg, w, big, ids), what="rank-8 adapter in reserved slots")
    assert orion.counters()["compiles"] == c0["compiles"]
    ffn = _adapter(cfg, "w1", r=4, alpha=4, seed=3)
    m.set_adapter(ffn)                                      # a new target: the programs grow once
    assert_logits_close(m.logits(ids), _ref(cfg, w, ffn, ids), what="grown slots")
    assert orion.counters()["compiles"] > c0["compiles"]
    m.release()                                             # the slots survive a release
    m.set_adapter(big)
    assert_logits_close(m.logits(ids), _ref(cfg, w, big, ids), what="after release")
    m.release()


# ------------------------------------------------------------------------------------------ files
@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_peft_files_roundtrip_and_hf_layout(tmp_path, family):
    from orion.models.loaders import canonical_to_hf
    cfg = tiny_llama() if family == "llama" else tiny_gpt2()
    w = {k: v.astype(np.float32) for k, v in weights16(cfg, seed=2).items()}
    targets = "q,k,v,o,w1,w2,w3" if family == "llama" else "c_attn,c_proj,c_fc"
    ad = L.init_adapter(cfg, L.LoraConfig(r=4, alpha=16, targets=targets, layers=[1]), seed=3, b_std=0.1, base=w,
                        name="demo")
    folder = ad.save(tmp_path / "ad")
    with open(os.path.join(folder, L.ADAPTER_CONFIG)) as f:
        conf = json.load(f)
    assert conf["r"] == 4 and conf["lora_alpha"] == 16 and conf["peft_type"] == "LORA"
    assert conf["task_type"] == "CAUSAL_LM" and conf["layers_to_transform"] == [1]
    if family == "llama":
        assert sorted(conf["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                         "down_proj"])        # PEFT keeps a set
    else:
        assert conf["target_modules"] == ["c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"]
        assert conf["fan_in_fan_out"] is True
    from orion.native.safetensors import read_safetensors
    t = read_safetensors(os.path.join(folder, L.ADAPTER_WEIGHTS))
    prefix = "base_model.model.model.layers.1." if family == "llama" else "base_model.model.transformer.h.1."
    assert all(k.startswith(prefix) and k.endswith((".lora_A.weight", ".lora_B.weight")) for k in t)
    assert len(t) == 2 * len(ad.names)
    back = L.load(folder, cfg, w)
    assert back.names == ad.names and back.base == ad.base and back.name == "demo"
    for n in ad.names:
        np.testing.assert_array_equal(back.A[n], ad.A[n])
        np.testing.assert_array_equal(back.B[n], ad.B[n])
    # PEFT semantics in Hugging Face space: W_hf + s * B_file @ A_file (Conv1D: its transpose) equals the
    # HF export of orion's merge — the q/k rows of B are in HF's rotate-half order in the file
    hf_base = canonical_to_hf(cfg, w, prefix=True)
    hf_merged = canonical_to_hf(cfg, L.merge(w, ad), prefix=True)
    s = ad.config.scale
    for k in t:
        if not k.endswith(".lora_A.weight"):
            continue
        mod = k[len("base_model.model."):-len(".lora_A.weight")]
        delta = s * t[mod.join(["base_model.model.", ".lora_B.weight"])].astype(np.float64) @ t[k].astype(np.float64)
        wk = mod + ".weight"
        got = hf_base[wk] + (delta.T if family == "gpt2" else delta)
        np.testing.assert_allclose(got, hf_merged[wk], atol=1e-5, err_msg=wk)
    # a path string works with set_adapter too
    m = Model(cfg, {k: v.astype(np.float16) for k, v in w.items()}, device="sim")
    m.set_adapter(folder, check_base=False)
    assert m.adapter.names == ad.names
    m.release()


def test_lora_config_spec_and_targets():
    c = L.LoraConfig.parse("r=8,alpha=16,targets=q,v")
    assert (c.r, c.alpha, c.targets, c.scale) == (8, 16.0, ("q", "v"), 2.0)
    c = L.LoraConfig.parse("r=4,targets=q_proj,mlp.down_proj,layers=0,2,rslora=1")
    assert c.alpha == 8 and c.layers == (0, 2) and c.rslora and c.scale == 8 / 2
    llama, gpt2 = tiny_llama(n_layers=3), tiny_gpt2()
    assert L.resolve_targets(llama, c.targets, c.layers) == ["layers.0.wq", "layers.0.w2", "layers.2.wq",
                                                             "layers.2.w2"]
    assert L.resolve_targets(gpt2, ["c_proj"]) == ["h.0.wo", "h.0.wproj", "h.1.wo", "h.1.wproj"]
    assert L.resolve_targets(gpt2, "attn.c_proj") == ["h.0.wo", "h.1.wo"]
    assert L.resolve_targets(llama, r".*\.1\.self_attn\.(q|v)_proj") == ["layers.1.wq", "layers.1.wv"]
    assert len(L.resolve_targets(llama, "all-linear")) == 21
    for bad in ("r=8,alpha", "r=x", "foo=1", "", "r=8,dropout=1.5"):
        with pytest.raises(L.AdapterConfigError):
            L.LoraConfig.parse(bad)


# ------------------------------------------------------------------------------------------ errors
def _write_peft(folder, tensors, conf):
    from orion.native.safetensors import write_safetensors
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, L.ADAPTER_WEIGHTS), tensors)
    with open(os.path.join(folder, L.ADAPTER_CONFIG), "w") as f:
        json.dump(conf, f)


def test_bad_adapters_raise_typed_errors(tmp_path):
    cfg = tiny_llama()
    w = weights16(cfg, seed=1)
    d = cfg.d_model
    q = "base_model.model.model.layers.0.self_attn.q_proj"
    conf = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "peft_type": "LORA"}
    A = np.zeros((4, d), np.float32)
    B = np.zeros((d, 4), np.float32)
    # unknown target module
    with pytest.raises(L.AdapterConfigError, match="unknown target module 'q_prj'"):
        L.init_adapter(cfg, L.LoraConfig(targets=["q_prj"]))
    with pytest.raises(L.AdapterConfigError, match="unknown target module 'c_attn'"):
        L.init_adapter(cfg, L.LoraConfig(targets=["c_attn"]))          # a GPT-2 module on Llama
    # rank mismatch: config vs tensors, A vs B
    _write_peft(tmp_path / "r", {q + ".lora_A.weight": A, q + ".lora_B.weight": B}, dict(conf, r=8))
    with pytest.raises(L.AdapterShapeError, match="rank mismatch"):
        L.load(tmp_path / "r", cfg)
    _write_peft(tmp_path / "ab", {q + ".lora_A.weight": A, q + ".lora_B.weight": B[:, :2]}, conf)
    with pytest.raises(L.AdapterShapeError, match="rank mismatch"):
        L.load(tmp_path / "ab", cfg)
    # shape mismatch: an adapter for a wider model
    _write_peft(tmp_path / "wide", {q + ".lora_A.weight": np.zeros((4, 2 * d), np.float32),
                                    q + ".lora_B.weight": np.zeros((2 * d, 4), np.float32)}, conf)
    with pytest.raises(L.AdapterShapeError, match="another model"):
        L.load(tmp_path / "wide", cfg)
    # a GPT-2 adapter on a Llama model; a layer the model does not have
    g = "base_model.model.transformer.h.0.attn.c_attn"
    _write_peft(tmp_path / "gpt2", {g + ".lora_A.weight": A, g + ".lora_B.weight": B}, conf)
    with pytest.raises(L.AdapterMismatch, match="gpt2"):
        L.load(tmp_path / "gpt2", cfg)
    q9 = q.replace("layers.0", "layers.9")
    _write_peft(tmp_path / "deep", {q9 + ".lora_A.weight": A, q9 + ".lora_B.weight": B}, conf)
    with pytest.raises(L.AdapterMismatch, match="layer"):
        L.load(tmp_path / "deep", cfg)
    # same architecture, other base weights (fingerprint) and other dimensions (orion metadata)
    ad = L.init_adapter(cfg, L.LoraConfig(r=4, targets="q"), base=w, b_std=0.1)
    other = weights16(cfg, seed=2)
    ad.save(tmp_path / "fp")
    with pytest.raises(L.AdapterMismatch, match="other base weights"):
        L.load(tmp_path / "fp", cfg, other)
    assert L.load(tmp_path / "fp", cfg, other, check_base=False).names == ad.names
    m = Model(cfg, other, device="sim")
    with pytest.raises(L.AdapterMismatch):
        m.set_adapter(ad)
    assert m.adapter is None
    with pytest.raises(L.AdapterMismatch, match="n_layers"):
        m2 = Model(tiny_llama(n_layers=3), weights16(tiny_llama(n_layers=3)), device="sim")
        m2.set_adapter(ad)
    # files: missing config, unsupported PEFT features, not an adapter
    os.remove(tmp_path / "r" / L.ADAPTER_CONFIG)
    with pytest.raises(L.AdapterFormatError, match="adapter_config.json"):
        L.load(tmp_path / "r", cfg)
    _write_peft(tmp_path / "dora", {q + ".lora_A.weight": A, q + ".lora_B.weight": B}, dict(conf, use_dora=True))
    with pytest.raises(L.AdapterFormatError, match="use_dora"):
        L.load(tmp_path / "dora", cfg)
    with pytest.raises(L.AdapterFormatError, match="no such"):
        L.load(tmp_path / "nothing", cfg)
    # every adapter error is an OrionError (and the shape/other-model ones a ModelFormatError)
    assert issubclass(L.AdapterShapeError, orion.ModelFormatError) and issubclass(L.LoraError, orion.OrionError)
    assert issubclass(L.AdapterConfigError, orion.InputError)


def test_orion_generate_with_adapter(tmp_path):
    import argparse
    import io

    from ckpt_writers import write_llama2c_v0
    from orion.cli.generate import add_generate_parser, cmd_generate
    cfg = tiny_llama(n_kv_heads=4, d_ff=128)
    w = weights16(cfg, seed=3, std=0.15)
    write_llama2c_v0(tmp_path / "m.bin", cfg, w)
    ad = _adapter(cfg, "q,v,w2", seed=7, b_std=0.3)
    ad.base = L.base_fingerprint(cfg, w)
    ad.save(tmp_path / "ad")
    p = argparse.ArgumentParser()
    add_generate_parser(p.add_subparsers())
    prompt = [1, 20, 30]
    toks = {}
    for extra in ([], ["--adapter", str(tmp_path / "ad")]):
        args = p.parse_args(["generate", "--model", str(tmp_path / "m.bin"), "--prompt-ids", "1 20 30", "--max-tokens",
                             "6", "--stop-token", "-1", "--device", "sim", "--cache-dir", str(tmp_path / "c")] + extra)
        out = io.StringIO()
        assert cmd_generate(args, out=out, err=io.StringIO()) == 0
        toks[bool(extra)] = [int(t) for t in out.getvalue().split()]
    assert toks[False] == reference.greedy(cfg, w, prompt, 6)
    assert toks[True] == reference.greedy(cfg, L.merge(w, ad), prompt, 6) != toks[False]
