"""Qwen 2 / 2.5 (``Qwen2ForCausalLM``: q/k/v biases) and Qwen 3 (``Qwen3ForCausalLM``: per-head q/k
RMSNorm, explicit ``head_dim``, optional ``attention_bias``). Sliding-window layers where
``use_sliding_window`` puts them (layers from ``max_window_layers`` on), or as ``layer_types`` says."""

from __future__ import annotations

from .hf_keys import ConfigReader
from .llama import BASE_LAYER, common_hf_config, layer_types, read_decoder

MODEL_TYPES = ("qwen2", "qwen3")
ARCHITECTURES = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2Model", "Qwen3Model")
DEFAULTS = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "use_sliding_window": False,
            "max_window_layers": 28, "attention_bias": False}


def read_config(r: ConfigReader):
    r.require("hidden_act", ("silu",), " for Qwen")
    qwen3 = r.str("model_type") == "qwen3"
    n_layers = r.int("num_hidden_layers")
    derived = None
    if r.bool("use_sliding_window"):
        first = r.int("max_window_layers", minimum=0)
        derived = ["sliding_attention" if i >= first else "full_attention" for i in range(n_layers)]
    types = layer_types(r, n_layers, derived)
    sliding = types is not None and "sliding" in types
    window = r.int("sliding_window", None) if sliding else None
    r.read.add("sliding_window")            # unused unless some layer slides (transformers ignores it too)
    if qwen3:
        bias = r.bool("attention_bias")
        if r.has("head_dim") is False:
            r.defaults["head_dim"] = 128
    else:
        bias = True                         # Qwen2 always has q/k/v biases (no config key)
    return read_decoder(r, qkv_bias=bias, qk_norm=qwen3, layer_types=types if sliding else None,
                        sliding_window=window)


def layer_tensors(cfg) -> dict:
    t = dict(BASE_LAYER)
    if cfg.qkv_bias:
        t.update({"self_attn.q_proj.bias": "bq", "self_attn.k_proj.bias": "bk", "self_attn.v_proj.bias": "bv"})
    if cfg.qk_norm:
        t.update({"self_attn.q_norm.weight": "q_norm", "self_attn.k_norm.weight": "k_norm"})
    return t


def hf_config(cfg) -> dict:
    qwen3 = cfg.model_type == "qwen3"
    d = {"architectures": ["Qwen3ForCausalLM" if qwen3 else "Qwen2ForCausalLM"], "model_type": cfg.model_type,
         "hidden_act": "silu", "use_sliding_window": False}
    if qwen3:
        d["attention_bias"] = cfg.qkv_bias
    d.update(common_hf_config(cfg))
    if cfg.layer_types:
        d.update(layer_types=[t + "_attention" for t in cfg.layer_types], sliding_window=cfg.sliding_window,
                 use_sliding_window=True)
    return d
