"""Adapters as program inputs on every model family (the transformers-made fixtures): a random adapter on
every attention and MLP linear gives, with ``model.set_adapter``, the float64 reference's logits with the
adapter merged, and the logits of the merged weights written as a checkpoint and loaded afresh.

Tolerance: 2 % of max |logit|. The fixtures' weights are large (transformers init range 0.3), so even the
base models' fp16 programs are up to 0.8 % of max |logit| away from the float64 reference (tests/models
compares them with transformers at 5 %); with the adapter the largest error measured is 1.05 %. Base
weights and adapters are fp16-exact and alpha/r is a power of two, so the programs hold exactly what the
reference uses; the merged model rounds W + s·BA to fp16 once more. The adapter must move the logits by
more than 10x the tolerance, so that a dropped, misplaced or mis-permuted adapter fails.
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))

from lora_helpers import MODEL_NAMES, MODELS, adapter, checkpoint, fp16, prompt_ids  # noqa: E402
from models_helpers import assert_logits_close  # noqa: E402

import orion  # noqa: E402
from orion import lora as L  # noqa: E402
from orion.models import Model, reference  # noqa: E402
from orion.models.loaders import canonical_to_hf  # noqa: E402
from orion.native.safetensors import write_safetensors  # noqa: E402

RTOL = 0.02


def _write_hf(folder, src, cfg, w) -> str:
    """``w`` (canonical) as a Hugging Face folder with the fixture's own config.json."""
    os.makedirs(folder)
    shutil.copy(src / "config.json", folder)
    write_safetensors(os.path.join(folder, "model.safetensors"),
                      {k: np.ascontiguousarray(v, np.float32) for k, v in canonical_to_hf(cfg, w).items()})
    return str(folder)


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_set_adapter_equals_merged_model_and_reference(name, tmp_path):
    ck = checkpoint(name)
    cfg, w = ck.config, fp16(ck.weights)
    ad = adapter(cfg)
    assert set(ad.names) == {f"layers.{i}.{k}" for i in range(cfg.n_layers)
                             for k in ("wq", "wk", "wv", "wo", "w1", "w2", "w3")}
    ids = prompt_ids(name)
    w64 = {k: v.astype(np.float64) for k, v in w.items()}
    ref = reference.forward(cfg, L.merge(w64, ad), ids)
    m = Model(cfg, w, device="sim")
    m.set_adapter(ad)
    got = m.logits(ids)
    assert_logits_close(got, ref, RTOL, what=f"{name}: adapter as program inputs vs float64 merged")
    assert np.abs(reference.forward(cfg, w64, ids) - ref).max() > 10 * RTOL * np.abs(ref).max(), "adapter too weak"
    # merge, write a checkpoint, load it afresh (loader + fp16 cache): the same logits
    folder = _write_hf(tmp_path / "merged", MODELS / name, cfg, L.merge(w, ad))
    merged = orion.models.load(folder, device="sim", cache=str(tmp_path / "cache"), tokenizer=None)
    assert merged.config.model_type == cfg.model_type
    assert_logits_close(merged.logits(ids), got, RTOL, what=f"{name}: merged checkpoint vs adapter as inputs")
    merged.release()
    m.release()


def test_fused_phi3_adapter_swaps_without_compiles_and_none_is_the_base():
    """Phi-3: the adapter of the fused qkv_proj / gate_up_proj lands on the split canonical linears; a
    second adapter within the slots swaps by surface writes only, and None gives the base exactly."""
    ck = checkpoint("phi3")
    cfg, w = ck.config, fp16(ck.weights)
    ids = prompt_ids("phi3")[:16]
    a, b = adapter(cfg, "qkv,gate_up", seed=2), adapter(cfg, "qkv,o", r=2, alpha=4, seed=3)
    m = Model(cfg, w, device="sim")
    base = m.logits(ids)
    m.set_adapter(a, targets="all-linear")
    w64 = {k: v.astype(np.float64) for k, v in w.items()}
    assert_logits_close(m.logits(ids), reference.forward(cfg, L.merge(w64, a), ids), RTOL, what="phi3 qkv+gate_up")
    c0 = orion.counters()
    m.set_adapter(b)
    assert_logits_close(m.logits(ids), reference.forward(cfg, L.merge(w64, b), ids), RTOL, what="phi3 swapped")
    m.set_adapter(None)
    np.testing.assert_array_equal(m.logits(ids), base)
    c1 = orion.counters()
    assert (c1["compiles"], c1["loads"]) == (c0["compiles"], c0["loads"])
    m.release()


def test_peft_folder_config_is_what_the_model_fixture_says(tmp_path):
    """A saved adapter names its base model and the PEFT task as PEFT does (read back by PEFT)."""
    ck = checkpoint("qwen3")
    ad = adapter(ck.config, "attn")
    folder = L.save(ad, tmp_path / "a", base_model="tests/fixtures/models/qwen3")
    with open(os.path.join(folder, L.ADAPTER_CONFIG)) as f:
        conf = json.load(f)
    assert conf["base_model_name_or_path"] == "tests/fixtures/models/qwen3"
    assert sorted(conf["target_modules"]) == ["k_proj", "o_proj", "q_proj", "v_proj"]
    assert conf["fan_in_fan_out"] is False and conf["task_type"] == "CAUSAL_LM"
