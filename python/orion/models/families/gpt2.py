"""GPT-2 (``GPT2LMHeadModel``): learned positions, LayerNorm, tanh-GELU, fused c_attn, tied head."""

from __future__ import annotations

from ...errors import ModelFormatError
from ..config_types import GPT2Config, _build
from .hf_keys import ConfigReader

MODEL_TYPES = ("gpt2",)
ARCHITECTURES = ("GPT2LMHeadModel", "GPT2Model")
DEFAULTS = {"layer_norm_epsilon": 1e-5, "activation_function": "gelu_new", "bos_token_id": 50256,
            "eos_token_id": 50256, "tie_word_embeddings": True}
# the double-heads model's summary head and the training-time dropouts do not act in a causal LM
HARMLESS = frozenset({"attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
                      "summary_proj_to_labels", "summary_first_dropout"})


# Per-layer tensors: HF suffix (after ``h.{i}.``) -> canonical key
LAYER = {
    "ln_1.weight": "ln1.g", "ln_1.bias": "ln1.b", "attn.c_attn.weight": "wqkv", "attn.c_attn.bias": "bqkv",
    "attn.c_proj.weight": "wo", "attn.c_proj.bias": "bo", "ln_2.weight": "ln2.g", "ln_2.bias": "ln2.b",
    "mlp.c_fc.weight": "wfc", "mlp.c_fc.bias": "bfc", "mlp.c_proj.weight": "wproj", "mlp.c_proj.bias": "bproj",
}


def layer_tensors(cfg) -> dict:
    return dict(LAYER)


def read_config(r: ConfigReader):
    r.require("activation_function", ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"), " for GPT-2 (the tanh GELU)")
    for k in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
        if r.bool(k, False):
            raise r.error(f"unsupported GPT-2 option {k}=true")
    if not r.bool("scale_attn_weights", True):
        raise r.error("unsupported GPT-2 option scale_attn_weights=false")
    n_embd = r.int(r.alias("n_embd", "hidden_size"))
    n_ctx = r.int(r.alias("n_positions", "n_ctx"))
    eos = r.ids("eos_token_id")
    bos = r.ids("bos_token_id")
    return _build(GPT2Config, r.source, vocab_size=r.int("vocab_size"), n_ctx=n_ctx, d_model=n_embd,
                  n_layers=r.int(r.alias("n_layer", "num_hidden_layers")),
                  n_heads=r.int(r.alias("n_head", "num_attention_heads")), d_ff=r.int("n_inner", 4 * n_embd),
                  norm_eps=r.float("layer_norm_epsilon"), tie_embeddings=r.bool("tie_word_embeddings"),
                  bos_id=bos[0] if bos else None, eos_id=eos[0] if eos else None)


def hf_config(cfg) -> dict:
    raise ModelFormatError("writing GPT-2 checkpoints is not supported")
