"""Llama 1/2/3.x, SmolLM 1/2 and llama2.c exports (``LlamaForCausalLM``) — and the reader the other
Llama-style families build on (:func:`read_decoder`).

Rope types ``default``, ``linear`` and ``llama3``; tied or untied heads; grouped-query attention;
an explicit ``head_dim``. ``attention_bias`` / ``mlp_bias`` are refused (no released Llama uses them).
"""

from __future__ import annotations

from ..config_types import LlamaConfig, _build
from .hf_keys import ConfigReader

MODEL_TYPES = ("llama",)
ARCHITECTURES = ("LlamaForCausalLM", "LlamaModel")
DEFAULTS = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2,
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False}

# Per-layer tensors shared by every Llama-style family: HF suffix -> canonical key.
BASE_LAYER = {
    "input_layernorm.weight": "rms_att", "self_attn.q_proj.weight": "wq", "self_attn.k_proj.weight": "wk",
    "self_attn.v_proj.weight": "wv", "self_attn.o_proj.weight": "wo", "post_attention_layernorm.weight": "rms_ffn",
    "mlp.gate_proj.weight": "w1", "mlp.down_proj.weight": "w2", "mlp.up_proj.weight": "w3",
}


def read_decoder(r: ConfigReader, **fixed):
    """The fields every Llama-style ``config.json`` shares; ``fixed``: the family's own fields."""
    hidden = r.int("hidden_size")
    heads = r.int("num_attention_heads")
    head_dim = r.int("head_dim", r.defaults.get("head_dim"))
    if head_dim is None:
        if hidden % heads:
            raise r.error(f"hidden_size {hidden} is not divisible by num_attention_heads {heads} "
                          f"(and there is no head_dim)")
        head_dim = hidden // heads
    eos = r.ids("eos_token_id", r.defaults.get("eos_token_id"))
    bos = r.ids("bos_token_id", r.defaults.get("bos_token_id"))
    rope = fixed.pop("rope") if "rope" in fixed else r.rope()
    scaling = rope_scaling_fields(rope)
    return _build(LlamaConfig, r.source, model_type=r.str("model_type"),
                  vocab_size=r.int("vocab_size"), n_ctx=r.int("max_position_embeddings"), d_model=hidden,
                  n_layers=r.int("num_hidden_layers"), n_heads=heads,
                  n_kv_heads=r.int("num_key_value_heads", heads), d_ff=r.int("intermediate_size"),
                  head_dim=head_dim, norm_eps=r.float("rms_norm_eps"), rope_theta=rope.theta, rope_scaling=scaling,
                  tie_embeddings=r.bool("tie_word_embeddings"), bos_id=bos[0] if bos else None,
                  eos_id=eos[0] if eos else None, eos_ids=eos, **fixed)


def rope_scaling_fields(rope) -> dict | None:
    """The fields of a :class:`Rope` besides theta that its type uses (None for the default type)."""
    keys = {"default": (), "linear": ("factor",),
            "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}
    if rope.type == "default":
        return None
    return {"type": rope.type, **{k: getattr(rope, k) for k in keys[rope.type]}}


def layer_types(r: ConfigReader, n_layers: int, derived: list[str] | None = None) -> list[str] | None:
    """``layer_types`` as orion spells it ("full" / "sliding"), from the file or ``derived`` (HF names)."""
    v = r.raw("layer_types", None)
    if v is None:
        v = derived
    if v is None:
        return None
    names = {"full_attention": "full", "sliding_attention": "sliding"}
    if not isinstance(v, list) or len(v) != n_layers or any(t not in names for t in v):
        raise r.error(f"config key 'layer_types' must list 'full_attention' or 'sliding_attention' for each of the "
                      f"{n_layers} layers, got {v!r}")
    return [names[t] for t in v]


def read_config(r: ConfigReader):
    r.require("hidden_act", ("silu",), " for Llama")
    r.require("attention_bias", (False,), " for Llama (no q/k/v/o biases)")
    r.require("mlp_bias", (False,), " for Llama (no MLP biases)")
    return read_decoder(r)


def layer_tensors(cfg) -> dict:
    return dict(BASE_LAYER)


def hf_config(cfg) -> dict:
    """The ``config.json`` of ``cfg`` (transformers >= 5 spelling, read back by every version we know)."""
    d = {"architectures": [ARCHITECTURES[0]], "model_type": "llama", "attention_bias": False, "mlp_bias": False,
         "hidden_act": "silu"}
    d.update(common_hf_config(cfg))
    return d


def common_hf_config(cfg) -> dict:
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling:
        rope = {"rope_theta": cfg.rope_theta, **{("rope_type" if k == "type" else k): v
                                                  for k, v in cfg.rope_scaling.items()}}
    eos = cfg.eos_ids if cfg.eos_ids and len(cfg.eos_ids) > 1 else cfg.eos_id
    return {"hidden_size": cfg.d_model, "intermediate_size": cfg.d_ff, "num_hidden_layers": cfg.n_layers,
            "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "head_dim": cfg.head_dim,
            "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.n_ctx, "rms_norm_eps": cfg.norm_eps,
            "rope_parameters": rope, "tie_word_embeddings": cfg.tie_embeddings, "bos_token_id": cfg.bos_id,
            "eos_token_id": eos, "torch_dtype": "float32"}
