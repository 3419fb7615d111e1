"""Gemma 3 text (``Gemma3ForCausalLM``, model_type ``gemma3_text``).

What differs from Llama, each a :class:`LlamaConfig` switch: sliding and global layers
(``layer_types``; by default every 6th layer is global) with their own RoPE bases
(``rope_local_base_freq`` / the ``sliding_attention`` entry of ``rope_parameters``), ``(1 + w)``
RMSNorms (folded into the weights on load, ``norm_offset`` = 1) including per-head q/k norms and
norms on the attention and MLP outputs, embeddings scaled by sqrt(hidden_size), a gelu-tanh gated MLP,
queries scaled by ``query_pre_attn_scalar ** -0.5`` and optional final logit soft-capping.
Attention soft-capping (Gemma 2) and bidirectional attention are refused.
"""

from __future__ import annotations

import math

from .hf_keys import ConfigReader
from .llama import BASE_LAYER, common_hf_config, layer_types, read_decoder

MODEL_TYPES = ("gemma3_text",)
ARCHITECTURES = ("Gemma3ForCausalLM", "Gemma3TextModel")
DEFAULTS = {"hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": 1e-6, "eos_token_id": 1, "bos_token_id": 2,
            "tie_word_embeddings": True, "attention_bias": False, "query_pre_attn_scalar": 256,
            "sliding_window": 4096, "use_bidirectional_attention": False}
HARMLESS = frozenset({"hidden_act"})      # superseded by hidden_activation in every Gemma 3 config


def read_config(r: ConfigReader):
    r.require("hidden_activation", ("gelu_pytorch_tanh", "gelu_tanh"), " for Gemma 3 (the tanh GELU)")
    r.require("attention_bias", (False,), " for Gemma 3")
    r.require("use_bidirectional_attention", (False,), " for a causal language model")
    if r.raw("attn_logit_softcapping", None) is not None:
        raise r.error("config key 'attn_logit_softcapping' (attention soft-capping) is not implemented by orion")
    n_layers = r.int("num_hidden_layers")
    pattern = r.int("sliding_window_pattern", 6) if r.has("sliding_window_pattern") else \
        r.int("_sliding_window_pattern", 6)
    derived = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)]
    types = layer_types(r, n_layers, derived)
    hidden = r.int("hidden_size")
    local_theta = r.float("rope_local_base_freq", 10000.0)
    params = r.d.get("rope_parameters")
    per_type = isinstance(params, dict) and any(isinstance(v, dict) for v in params.values())
    if per_type and "sliding_attention" not in params and "sliding" in types:
        raise r.error("config key 'rope_parameters' has no 'sliding_attention' entry for the sliding layers")
    if per_type and "sliding_attention" in params:
        local = r.rope("sliding_attention")
        if local.type != "default":
            raise r.error("rope_parameters['sliding_attention']: only the default rope type is implemented for "
                          "Gemma 3's sliding layers")
        if r.has("rope_local_base_freq") and local.theta != local_theta:
            raise r.error("'rope_local_base_freq' disagrees with rope_parameters['sliding_attention'].rope_theta")
        local_theta = local.theta
    rope = r.rope("full_attention", default_theta=1_000_000.0)
    return read_decoder(r, rope=rope, layer_types=types, sliding_window=r.int("sliding_window"),
                        local_rope_theta=local_theta, qk_norm=True, sandwich_norms=True, mlp_act="gelu_tanh",
                        embed_scale=math.sqrt(hidden), attn_scale=r.float("query_pre_attn_scalar") ** -0.5,
                        final_softcap=r.float("final_logit_softcapping", None), norm_offset=1.0)


def layer_tensors(cfg) -> dict:
    t = dict(BASE_LAYER)
    t.update({"post_attention_layernorm.weight": "rms_att_post", "pre_feedforward_layernorm.weight": "rms_ffn",
              "post_feedforward_layernorm.weight": "rms_ffn_post", "self_attn.q_norm.weight": "q_norm",
              "self_attn.k_norm.weight": "k_norm"})
    return t


def hf_config(cfg) -> dict:
    d = {"architectures": [ARCHITECTURES[0]], "model_type": "gemma3_text", "hidden_activation": "gelu_pytorch_tanh",
         "attention_bias": False, "query_pre_attn_scalar": cfg.attn_scale ** -2,
         "final_logit_softcapping": cfg.final_softcap, "attn_logit_softcapping": None,
         "sliding_window": cfg.sliding_window, "layer_types": [t + "_attention" for t in cfg.layer_types]}
    d.update(common_hf_config(cfg))
    full = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling:
        full = {"rope_theta": cfg.rope_theta, **{("rope_type" if k == "type" else k): v
                                                  for k, v in cfg.rope_scaling.items()}}
    d["rope_parameters"] = {"full_attention": full,
                            "sliding_attention": {"rope_type": "default", "rope_theta": cfg.local_rope_theta}}
    return d
