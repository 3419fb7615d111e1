"""What an adapter may target, per family: the module paths and shapes come from the family modules
(models/families), q is ``n_heads * head_dim`` rows, Phi-3's fused modules are targeted whole, norms and
biases are not targets."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from lora_helpers import MODEL_NAMES, checkpoint  # noqa: E402

from orion import lora as L  # noqa: E402
from orion.lora.targets import module_parts, modules  # noqa: E402
from orion.models.families import family_module  # noqa: E402
from orion.models.loaders import canonical_to_hf  # noqa: E402

LINEARS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_module_paths_are_the_checkpoints_weight_names(name):
    ck = checkpoint(name)
    cfg = ck.config
    hf = set(canonical_to_hf(cfg, ck.weights))
    layer = family_module(cfg.model_type).layer_tensors(cfg)
    shapes = L.linear_shapes(cfg)
    assert sorted(shapes) == sorted(f"layers.{i}.{k}" for i in range(cfg.n_layers) for k in LINEARS)
    for n, (out, inp) in shapes.items():
        assert ck.weights[n].shape == (out, inp)
        path = L.module_path(cfg, n)
        assert path + ".weight" in hf and path[len(f"model.layers.{n.split('.')[1]}."):] + ".weight" in layer
        parts = module_parts(cfg, path)
        assert n in [p for p, _ in parts]
        assert L.canonical_name(cfg, path) == (n if len(parts) == 1 else None)
    assert L.module_path(cfg, "layers.0.wo") == "model.layers.0.self_attn.o_proj"


def test_shapes_follow_head_dim_and_fused_rows():
    qwen3 = checkpoint("qwen3").config                       # head_dim 16 != 32 / 4
    s = L.linear_shapes(qwen3)
    assert s["layers.0.wq"] == (qwen3.n_heads * 16, qwen3.d_model) and s["layers.0.wo"] == (qwen3.d_model, 64)
    assert s["layers.0.wk"] == (qwen3.n_kv_heads * 16, qwen3.d_model)
    phi3 = checkpoint("phi3").config
    mods = {m.suffix: m.parts for m in modules(phi3)}
    assert mods == {"self_attn.qkv_proj": (("wq", phi3.q_dim), ("wk", phi3.kv_dim), ("wv", phi3.kv_dim)),
                    "self_attn.o_proj": (("wo", phi3.d_model),),
                    "mlp.gate_up_proj": (("w1", phi3.d_ff), ("w3", phi3.d_ff)), "mlp.down_proj": (("w2", phi3.d_model),)}
    assert L.module_path(phi3, "layers.1.wk") == "model.layers.1.self_attn.qkv_proj"
    assert L.module_path(phi3, "layers.1.w3") == "model.layers.1.mlp.gate_up_proj"


def test_targets_on_fused_and_unfused_families():
    phi3, qwen2 = checkpoint("phi3").config, checkpoint("qwen2").config
    qkv = [f"layers.{i}.{k}" for i in range(2) for k in ("wq", "wk", "wv")]
    for t in ("qkv", "q,k,v", "qkv_proj", "self_attn.qkv_proj", ["q", "k", "v"], r".*\.qkv_proj"):
        assert L.resolve_targets(phi3, t) == qkv
    assert L.resolve_targets(phi3, "gate_up") == L.resolve_targets(phi3, "gate,up") == \
        [f"layers.{i}.{k}" for i in range(2) for k in ("w1", "w3")]
    assert L.resolve_targets(phi3, "model.layers.1.self_attn.qkv_proj") == qkv[3:]   # PEFT: a full path, one layer
    assert L.resolve_targets(phi3, "attn", layers=[0]) == ["layers.0.wq", "layers.0.wk", "layers.0.wv", "layers.0.wo"]
    assert L.resolve_targets(qwen2, "q,v") == ["layers.0.wq", "layers.0.wv", "layers.1.wq", "layers.1.wv"]
    assert L.resolve_targets(qwen2, "qkv") == qkv                            # a short name for three linears
    with pytest.raises(L.AdapterConfigError, match="target 'qkv' \\(or q,k,v together\\)"):
        L.resolve_targets(phi3, "q,v")
    with pytest.raises(L.AdapterConfigError, match="unknown target module 'qkv_proj' for a qwen2 model"):
        L.resolve_targets(qwen2, "qkv_proj")
    with pytest.raises(L.AdapterConfigError):
        L.init_adapter(phi3, L.LoraConfig(targets=("q", "v")))              # the default targets: say what to do


@pytest.mark.parametrize("name, norm", [("qwen3", "q_norm"), ("gemma3", "k_norm"), ("gemma3", "pre_feedforward_layernorm"),
                                        ("qwen2", "input_layernorm")])
def test_norms_are_not_targets(name, norm):
    cfg = checkpoint(name).config
    with pytest.raises(L.AdapterConfigError, match=f"unknown target module '{norm}'"):
        L.resolve_targets(cfg, norm)
    assert all(n.rsplit(".", 1)[-1] in LINEARS for n in L.resolve_targets(cfg, "all-linear"))


def test_adapter_for_another_head_dim_is_refused():
    """Same d_model, heads and d_ff but another head_dim (Qwen 3's explicit one): the adapter's q/k/v/o
    shapes do not fit, which check_model says before anything runs."""
    from orion.models import LlamaConfig
    qwen3 = checkpoint("qwen3").config
    ad = L.init_adapter(qwen3, L.LoraConfig(r=2, targets="q,o"))
    other = LlamaConfig(**({k: v for k, v in qwen3.to_dict().items() if k != "family"} | {"head_dim": 8}))
    with pytest.raises(L.AdapterMismatch, match="layers.0.wq"):
        ad.check_model(other)
