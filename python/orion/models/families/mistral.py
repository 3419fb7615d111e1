"""Mistral (``MistralForCausalLM``): Llama with sliding-window attention in every layer when
``sliding_window`` is set (null in v0.2+: full attention)."""

from __future__ import annotations

from .hf_keys import ConfigReader
from .llama import BASE_LAYER, common_hf_config, read_decoder

MODEL_TYPES = ("mistral",)
ARCHITECTURES = ("MistralForCausalLM", "MistralModel")
DEFAULTS = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2,
            "tie_word_embeddings": False, "sliding_window": 4096}


def read_config(r: ConfigReader):
    r.require("hidden_act", ("silu",), " for Mistral")
    window = r.int("sliding_window", None) if "sliding_window" in r.d else r.int("sliding_window")
    n_layers = r.int("num_hidden_layers")
    return read_decoder(r, sliding_window=window, layer_types=["sliding"] * n_layers if window else None)


def layer_tensors(cfg) -> dict:
    return dict(BASE_LAYER)


def hf_config(cfg) -> dict:
    d = {"architectures": [ARCHITECTURES[0]], "model_type": "mistral", "hidden_act": "silu"}
    d.update(common_hf_config(cfg))
    d["sliding_window"] = cfg.sliding_window
    return d
