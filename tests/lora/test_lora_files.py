"""PEFT adapter folders on every model family, checked against PEFT itself.

The adapters in tests/fixtures/lora were made by PEFT (scripts/make_lora_fixtures.py: "all-linear" on
Qwen 2 (q/k/v biases), Qwen 3 (head_dim != hidden / heads), Phi-3 (fused qkv_proj / gate_up_proj) and
Gemma 3, with a rank_pattern and an alpha_pattern), with PEFT's logits. Pinned here:

- orion reads them to PEFT's math: the float64 reference with ``lora.merge`` gives PEFT's logits
  (relative 1e-4; measured <= 2e-6), the fp16 programs with ``set_adapter`` within the fixture tolerance
  of tests/models (0.05 of max |logit|; measured <= 1 %), argmax equal where the margin is clear;
- PEFT's convention computed here in numpy on the Hugging Face tensors — ``W_hf + (alpha_m / r_m) B A``
  per module, the fused rows and rotate-half q/k rows as they are in the files — and loaded through
  orion's checkpoint loader equals ``lora.merge`` on orion's canonical weights;
- load → save gives PEFT's tensors back bit for bit, and every family's save → load is exact, with
  the module names PEFT uses;
- what has no exact PEFT form (part of a fused module, untied lora_A) raises AdapterConfigError.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))

from lora_helpers import MODEL_NAMES, MODELS, PEFT_NAMES, adapter, checkpoint, fp16, peft_folder  # noqa: E402

from orion import lora as L  # noqa: E402
from orion.models import Model, loaders, reference  # noqa: E402
from orion.native.safetensors import read_safetensors, write_safetensors  # noqa: E402


def _peft_reference(name):
    return np.load(peft_folder(name) / "reference.npz")


@pytest.mark.parametrize("name", PEFT_NAMES)
def test_peft_adapters_give_peft_logits(name):
    ck = checkpoint(name)
    cfg = ck.config
    folder = peft_folder(name)
    ref = _peft_reference(name)
    ids = [int(t) for t in ref["ids"]]
    ad = L.load(folder, cfg)
    assert len(ad.names) == 7 * cfg.n_layers
    want = ref["logits"].astype(np.float64)
    base = np.load(MODELS / name / "reference.npz")["logits"].astype(np.float64)
    scale = np.abs(want).max()
    assert np.abs(want - base).max() > 0.5 * scale           # PEFT's adapter changes the model a lot
    w64 = {k: np.asarray(v, np.float64) for k, v in ck.weights.items()}
    exact = reference.forward(cfg, L.merge(w64, ad), ids)
    assert np.abs(exact - want).max() < 1e-4 * scale, "orion's merge is not PEFT's math"
    m = Model(cfg, fp16(ck.weights), device="sim")
    m.set_adapter(folder)
    got = m.logits(ids)
    assert np.abs(got - want).max() < 0.05 * scale
    top2 = np.sort(want, axis=1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > 0.01 * scale
    assert (got.argmax(1) == want.argmax(1))[clear].all()
    m.release()


def _peft_scale(conf: dict, path: str, r: int) -> float:
    """PEFT's rule, written out independently: a pattern key matches a module path ending in it."""
    alpha = conf["lora_alpha"]
    for k, v in (conf.get("alpha_pattern") or {}).items():
        if re.match(rf"(.*\.)?({k})$", path):
            alpha = v
    return alpha / (r ** 0.5 if conf.get("use_rslora") else r)


@pytest.mark.parametrize("name", PEFT_NAMES)
def test_peft_convention_in_hf_space_equals_merge_through_the_loader(name, tmp_path):
    ck = checkpoint(name)
    folder = peft_folder(name)
    with open(folder / L.ADAPTER_CONFIG) as f:
        conf = json.load(f)
    lora_t = read_safetensors(str(folder / L.ADAPTER_WEIGHTS))
    hf = {k: v.astype(np.float64) for k, v in read_safetensors(str(MODELS / name / "model.safetensors")).items()}
    ranks = set()
    for key, a in lora_t.items():
        if ".lora_A." not in key:
            continue
        path = key[len("base_model.model."):-len(".lora_A.weight")]
        b = lora_t[key.replace(".lora_A.", ".lora_B.")]
        ranks.add(a.shape[0])
        hf[path + ".weight"] += _peft_scale(conf, path, a.shape[0]) * (b.astype(np.float64) @ a.astype(np.float64))
    assert ranks == {2, 4}                          # the rank_pattern is in the file
    out = tmp_path / "merged"
    out.mkdir()
    shutil.copy(MODELS / name / "config.json", out)
    write_safetensors(str(out / "model.safetensors"), {k: v.astype(np.float32) for k, v in hf.items()})
    got = loaders.read_checkpoint(str(out)).weights
    want = L.merge({k: np.asarray(v, np.float64) for k, v in ck.weights.items()}, L.load(folder, ck.config))
    changed = 0
    for k, v in want.items():
        np.testing.assert_allclose(got[k], v, rtol=0, atol=2e-6 * max(1.0, np.abs(v).max()), err_msg=k)
        changed += not np.array_equal(np.asarray(ck.weights[k], np.float64), v)
    assert changed == 7 * ck.config.n_layers


@pytest.mark.parametrize("name", PEFT_NAMES)
def test_peft_load_save_gives_the_same_files(name, tmp_path):
    folder = peft_folder(name)
    ck = checkpoint(name)
    ad = L.load(folder, ck.config)
    out = L.save(ad, tmp_path / "again")
    theirs, ours = read_safetensors(str(folder / L.ADAPTER_WEIGHTS)), read_safetensors(os.path.join(out, L.ADAPTER_WEIGHTS))
    assert sorted(theirs) == sorted(ours)
    for k in theirs:
        np.testing.assert_array_equal(ours[k], theirs[k], err_msg=k)
    with open(folder / L.ADAPTER_CONFIG) as f:
        a = json.load(f)
    with open(os.path.join(out, L.ADAPTER_CONFIG)) as f:
        b = json.load(f)
    for k in ("r", "lora_alpha", "rank_pattern", "alpha_pattern", "use_rslora", "peft_type", "task_type"):
        assert a[k] == b[k], k
    back = L.load(out, ck.config)
    assert back.names == ad.names and all(back.scale(n) == ad.scale(n) for n in ad.names)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_save_load_round_trip_every_family(name, tmp_path):
    ck = checkpoint(name)
    cfg = ck.config
    ad = adapter(cfg, seed=4, b_std=0.2)
    folder = L.save(ad, tmp_path / "ad")
    back = L.load(folder, cfg)
    assert back.names == ad.names
    for n in ad.names:
        np.testing.assert_array_equal(back.A[n], ad.A[n])
        np.testing.assert_array_equal(back.B[n], ad.B[n])
    t = read_safetensors(os.path.join(folder, L.ADAPTER_WEIGHTS))
    # the module paths are the checkpoint's own: every adapted weight exists under that name
    hf_names = set(loaders.canonical_to_hf(cfg, ck.weights))
    mods = {k[len("base_model.model."):-len(".lora_A.weight")] for k in t if k.endswith(".lora_A.weight")}
    assert {m + ".weight" for m in mods} <= hf_names and len(t) == 2 * len(mods)
    fused = cfg.model_type == "phi3"
    assert len(mods) == (4 if fused else 7) * cfg.n_layers
    # the same names as PEFT's own "all-linear" adapter of this fixture
    if name in PEFT_NAMES:
        assert set(t) == set(read_safetensors(str(peft_folder(name) / L.ADAPTER_WEIGHTS)))


def test_phi3_fused_modules_in_the_file(tmp_path):
    ck = checkpoint("phi3")
    cfg = ck.config
    ad = adapter(cfg, "qkv,gate_up", seed=5, b_std=0.2)
    assert ad.tied == [tuple(f"layers.{i}.{k}" for k in ks) for i in range(cfg.n_layers)
                       for ks in (("wq", "wk", "wv"), ("w1", "w3"))]
    t = read_safetensors(os.path.join(L.save(ad, tmp_path / "f"), L.ADAPTER_WEIGHTS))
    p = "base_model.model.model.layers.0."
    a, b = t[p + "self_attn.qkv_proj.lora_A.weight"], t[p + "self_attn.qkv_proj.lora_B.weight"]
    assert a.shape == (4, cfg.d_model) and b.shape == (cfg.q_dim + 2 * cfg.kv_dim, 4)
    np.testing.assert_array_equal(a, ad.A["layers.0.wk"])
    # rows q | k | v, q and k in Hugging Face's rotate-half order (as the fused weight's rows)
    q, k, v = np.split(b, [cfg.q_dim, cfg.q_dim + cfg.kv_dim])
    hf = {"wq": q, "wk": k, "wv": v}
    for key, rows in hf.items():
        np.testing.assert_array_equal(loaders.to_canonical_tensor(cfg, f"layers.0.{key}", rows), ad.B[f"layers.0.{key}"])
    assert not np.array_equal(q, ad.B["layers.0.wq"])        # the permutation is really applied
    gu = t[p + "mlp.gate_up_proj.lora_B.weight"]
    np.testing.assert_array_equal(gu, np.concatenate([ad.B["layers.0.w1"], ad.B["layers.0.w3"]]))


def test_no_exact_peft_form_raises(tmp_path):
    ck = checkpoint("phi3")
    cfg = ck.config
    for targets in ("q", "q,v", "q_proj", "gate", "w3"):
        with pytest.raises(L.AdapterConfigError, match="fuses .* into one module .*cannot be written exactly"):
            L.resolve_targets(cfg, targets)
    ad = adapter(cfg, "qkv", seed=6, b_std=0.2)
    # untied lora_A (what a trainer that steps each part on its own gradient would leave)
    untied = ad.copy()
    untied.A["layers.1.wv"] = untied.A["layers.1.wv"] + np.float32(0.5)
    with pytest.raises(L.AdapterConfigError, match="different lora_A.*qkv_proj"):
        L.save(untied, tmp_path / "u")
    # part of a fused module, built by hand: runs (merge) but has no PEFT file
    part = L.Adapter(ad.config, cfg, {n: ad.A[n] for n in ad.names if n.endswith(".wq")},
                     {n: ad.B[n] for n in ad.names if n.endswith(".wq")})
    assert set(L.merge(ck.weights, part)) == set(ck.weights)
    with pytest.raises(L.AdapterConfigError, match="without .*cannot be saved as a PEFT file exactly"):
        L.save(part, tmp_path / "p")
    assert not os.path.exists(tmp_path / "p" / L.ADAPTER_WEIGHTS)


def test_tie_gradients_keeps_a_fused_module_one_adapter():
    """The gradient of the shared lora_A of qkv_proj is the sum over q, k, v: tie_gradients gives each
    copy that sum (so equal copies stay equal under any per-tensor optimizer step)."""
    cfg = checkpoint("phi3").config
    ad = adapter(cfg, "qkv,o", seed=7)
    rng = np.random.default_rng(0)
    grads = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in ad.params().items()}
    before = {k: v.copy() for k, v in grads.items()}
    ad.tie_gradients(grads)
    for i in range(cfg.n_layers):
        g = [f"layers.{i}.{k}.lora_A" for k in ("wq", "wk", "wv")]
        total = sum(before[k].astype(np.float64) for k in g)
        for k in g:
            np.testing.assert_allclose(grads[k], total, rtol=1e-6)
        for k in (f"layers.{i}.wo.lora_A", f"layers.{i}.wq.lora_B"):
            np.testing.assert_array_equal(grads[k], before[k])


def _write(folder, tensors, conf):
    os.makedirs(folder, exist_ok=True)
    write_safetensors(os.path.join(folder, L.ADAPTER_WEIGHTS), tensors)
    with open(os.path.join(folder, L.ADAPTER_CONFIG), "w") as f:
        json.dump(conf, f)
    return folder


def test_bad_fused_files_and_unsupported_peft_features(tmp_path):
    cfg = checkpoint("phi3").config
    p = "base_model.model.model.layers.0.self_attn.qkv_proj"
    a = np.zeros((4, cfg.d_model), np.float32)
    conf = {"r": 4, "lora_alpha": 8, "target_modules": ["qkv_proj"], "peft_type": "LORA"}
    _write(tmp_path / "rows", {p + ".lora_A.weight": a, p + ".lora_B.weight": np.zeros((cfg.q_dim, 4), np.float32)},
           conf)
    with pytest.raises(L.AdapterShapeError, match="fused module"):
        L.load(tmp_path / "rows", cfg)
    good = {p + ".lora_A.weight": a, p + ".lora_B.weight": np.zeros((cfg.q_dim + 2 * cfg.kv_dim, 4), np.float32)}
    assert L.load(_write(tmp_path / "ok", good, conf), cfg).names == ["layers.0.wq", "layers.0.wk", "layers.0.wv"]
    # a q_proj adapter is for an unfused model
    q = "base_model.model.model.layers.0.self_attn.q_proj"
    _write(tmp_path / "q", {q + ".lora_A.weight": a, q + ".lora_B.weight": np.zeros((cfg.q_dim, 4), np.float32)}, conf)
    with pytest.raises(L.AdapterMismatch, match="not a linear of this phi3 model"):
        L.load(tmp_path / "q", cfg)
    for key, value in (("lora_bias", True), ("use_qalora", True), ("layer_replication", [[0, 1]]),
                       ("target_parameters", ["mlp.experts"]), ("init_lora_weights", "pissa_niter_4")):
        _write(tmp_path / key, good, dict(conf, **{key: value}))
        with pytest.raises(L.AdapterFormatError, match=key):
            L.load(tmp_path / key, cfg)
