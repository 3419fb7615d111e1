"""Config keys that change the math are read, in every spelling, or refused — never defaulted.

A transformers-5 ``rope_parameters`` object was once ignored (theta fell back to 10000: 8% top-1
agreement). These tests feed every math key each family reads, in both the transformers-5 form and the
older top-level form, and check that (a) both forms give the same config, (b) changing the key changes
the config, (c) keys orion does not implement are a ModelFormatError naming them.
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from orion.errors import ModelFormatError
from orion.models.config import config_from_hf

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")


def _base(name: str) -> dict:
    with open(os.path.join(FIXTURES, name, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def _cfg(d: dict):
    return config_from_hf(d, "config.json")


def _with(d: dict, **kv) -> dict:
    d = copy.deepcopy(d)
    for k, v in kv.items():
        if v is _DROP:
            d.pop(k, None)
        else:
            d[k] = v
    return d


_DROP = object()


def test_transformers5_rope_parameters_theta_is_read():
    d = _with(_base("llama3"), rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
    assert _cfg(d).rope_theta == 500000.0
    assert _cfg(d).rope_scaling is None


@pytest.mark.parametrize("rope", [
    {"rope_type": "default", "rope_theta": 123456.0},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 256},
])
@pytest.mark.parametrize("name", ["llama3", "qwen2", "qwen3", "mistral", "phi3"])
def test_rope_keys_in_both_spellings_give_the_same_config(name, rope):
    new = _with(_base(name), rope_parameters=rope, rope_theta=_DROP, rope_scaling=_DROP)
    scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
    old = _with(_base(name), rope_parameters=_DROP, rope_theta=rope["rope_theta"],
                rope_scaling=None if rope["rope_type"] == "default" else scaling)
    a, b = _cfg(new), _cfg(old)
    assert a == b
    assert a.rope_theta == rope["rope_theta"]
    assert (a.rope.type, a.rope.factor) == (rope["rope_type"], rope.get("factor", 1.0))


def test_gemma3_rope_keys_in_both_spellings_give_the_same_config():
    new = _base("gemma3")
    full, local = new["rope_parameters"]["full_attention"], new["rope_parameters"]["sliding_attention"]
    old = _with(new, rope_parameters=_DROP, rope_theta=full["rope_theta"], rope_local_base_freq=local["rope_theta"])
    assert _cfg(new) == _cfg(old)
    scaled = _with(new, rope_parameters={"full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 8.0},
                                         "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}})
    scaled_old = _with(new, rope_parameters=_DROP, rope_theta=1e6, rope_scaling={"rope_type": "linear", "factor": 8.0},
                       rope_local_base_freq=1e4)
    a = _cfg(scaled)
    assert a == _cfg(scaled_old)
    assert a.rope.type == "linear" and a.rope.theta == 1e6
    assert a.layer_rope(0).theta == 1e4 and a.layer_rope(0).type == "default"      # layer 0 slides
    assert a.layer_rope(1).type == "linear"


@pytest.mark.parametrize("name", ["gemma3", "llama3", "mistral"])
def test_layer_ropes_are_each_layers_rope_shared_by_kind(name):
    """``layer_ropes()`` (the per-step feeds' one call) is ``layer_rope(l)`` of every layer, one object per
    kind of layer."""
    cfg = _cfg(_base(name))
    ropes = cfg.layer_ropes()
    assert ropes == [cfg.layer_rope(l) for l in range(cfg.n_layers)]
    kinds = {cfg.layer_sliding(l) for l in range(cfg.n_layers)}
    assert len({id(r) for r in ropes}) == len(kinds)


# (fixture, key, other value): each changes the math, so it must change the config
MATH_KEYS = [
    ("llama3", "rms_norm_eps", 1e-3), ("llama3", "tie_word_embeddings", True), ("llama3", "num_key_value_heads", 4),
    ("llama3", "head_dim", 16), ("llama3", "max_position_embeddings", 64), ("llama3", "eos_token_id", 7),
    ("llama_legacy_keys", "rope_theta", 10000.0),
    ("llama_legacy_keys", "rope_scaling", {"rope_type": "linear", "factor": 3.0}),
    ("qwen2", "use_sliding_window", True), ("qwen2", "layer_types", ["sliding_attention", "full_attention"]),
    ("qwen3", "attention_bias", True), ("qwen3", "head_dim", 8), ("qwen3", "rms_norm_eps", 1e-2),
    ("mistral", "sliding_window", 4), ("mistral", "sliding_window", None),
    ("gemma3", "query_pre_attn_scalar", 16), ("gemma3", "final_logit_softcapping", 30.0),
    ("gemma3", "final_logit_softcapping", None), ("gemma3", "sliding_window", 4),
    ("gemma3", "layer_types", ["full_attention"] * 4),
    ("gemma3_legacy_keys", "sliding_window_pattern", 4), ("gemma3_legacy_keys", "rope_local_base_freq", 5000.0),
    ("phi3", "sliding_window", 16),
]


@pytest.mark.parametrize("name,key,value", MATH_KEYS)
def test_every_math_key_changes_the_config(name, key, value):
    base = _base(name)
    if key == "use_sliding_window":
        changed = _with(base, use_sliding_window=True, sliding_window=8, max_window_layers=1, layer_types=_DROP)
    elif name == "qwen2" and key == "layer_types":
        changed = _with(base, layer_types=value, sliding_window=8)
    else:
        changed = _with(base, **{key: value})
    assert _cfg(changed) != _cfg(base)


@pytest.mark.parametrize("name,patch,needle", [
    ("llama3", {"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "yarn"),
    ("llama3", {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 4.0}}, "dynamic"),
    ("llama_legacy_keys", {"rope_scaling": {"type": "yarn", "factor": 2.0}}, "yarn"),
    ("phi3", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "longrope"),
    ("phi3", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
     "partial_rotary_factor"),
    ("llama3", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0}}, "low_freq_factor"),
    ("llama3", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "mscale": 1.0}}, "mscale"),
    ("llama3", {"rope_theta": 10000.0}, "disagrees"),
    ("llama3", {"hidden_act": "gelu"}, "hidden_act"),
    ("llama3", {"attention_bias": True}, "attention_bias"),
    ("llama3", {"mlp_bias": True}, "mlp_bias"),
    ("llama3", {"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
    ("llama3", {"some_new_feature": 1}, "some_new_feature"),
    ("gemma3", {"attn_logit_softcapping": 50.0}, "attn_logit_softcapping"),
    ("gemma3", {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    ("gemma3", {"hidden_activation": "gelu"}, "hidden_activation"),
    ("gemma3", {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e4}}},
     "sliding_attention"),
    ("qwen2", {"layer_types": ["full_attention"]}, "layer_types"),
    ("llama3", {"rms_norm_eps": "abc"}, "rms_norm_eps"),
    ("llama3", {"rope_parameters": {"rope_type": "default", "rope_theta": [1]}}, "rope_theta"),
    ("llama3", {"architectures": 5}, "architectures"),
    ("llama3", {"architectures": ["LlamaForSequenceClassification"]}, "LlamaForSequenceClassification"),
    ("llama3", {"num_attention_heads": 0}, "num_attention_heads"),
    ("llama3", {"hidden_size": _DROP}, "hidden_size"),
    ("llama3", {"model_type": "mamba"}, "mamba"),
])
def test_unimplemented_or_malformed_keys_are_refused_by_name(name, patch, needle):
    with pytest.raises(ModelFormatError) as e:
        _cfg(_with(_base(name), **patch))
    assert needle in str(e.value) and "config.json" in str(e.value)


def test_harmless_bookkeeping_keys_are_accepted():
    d = _with(_base("llama3"), torch_dtype="bfloat16", use_cache=False, initializer_range=0.5, pad_token_id=3,
              attention_dropout=0.1, pretraining_tp=1, transformers_version="4.99.0")
    assert _cfg(d) == _cfg(_base("llama3"))
