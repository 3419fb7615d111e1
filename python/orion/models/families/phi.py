"""Phi-3 / Phi-3.5 mini (``Phi3ForCausalLM``): Llama math with fused ``qkv_proj`` (rows q | k | v) and
``gate_up_proj`` (rows gate | up), split on load into the canonical Wq/Wk/Wv and W1/W3 and fused again
on export. ``longrope`` scaling and partial rotary factors are refused; ``sliding_window`` applies to
every layer when set."""

from __future__ import annotations

from .hf_keys import ConfigReader
from .llama import common_hf_config, read_decoder

MODEL_TYPES = ("phi3",)
ARCHITECTURES = ("Phi3ForCausalLM", "Phi3Model")
DEFAULTS = {"hidden_act": "silu", "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 32000,
            "tie_word_embeddings": False}
# only the longrope scaling reads it, and longrope is refused
HARMLESS = frozenset({"original_max_position_embeddings"})


def read_config(r: ConfigReader):
    r.require("hidden_act", ("silu",), " for Phi-3")
    if r.raw("partial_rotary_factor", 1.0) != 1.0:
        raise r.error(f"config key 'partial_rotary_factor' = {r.d['partial_rotary_factor']!r} is not implemented "
                      f"by orion (only 1.0)")
    window = r.int("sliding_window", None)
    n_layers = r.int("num_hidden_layers")
    return read_decoder(r, sliding_window=window, layer_types=["sliding"] * n_layers if window else None)


def layer_tensors(cfg) -> dict:
    """HF suffix -> canonical key, or a tuple of (key, rows) for fused tensors split along the rows."""
    return {"input_layernorm.weight": "rms_att", "post_attention_layernorm.weight": "rms_ffn",
            "self_attn.qkv_proj.weight": (("wq", cfg.q_dim), ("wk", cfg.kv_dim), ("wv", cfg.kv_dim)),
            "self_attn.o_proj.weight": "wo", "mlp.gate_up_proj.weight": (("w1", cfg.d_ff), ("w3", cfg.d_ff)),
            "mlp.down_proj.weight": "w2"}


def hf_config(cfg) -> dict:
    d = {"architectures": [ARCHITECTURES[0]], "model_type": "phi3", "hidden_act": "silu",
         "sliding_window": cfg.sliding_window}
    d.update(common_hf_config(cfg))
    return d
