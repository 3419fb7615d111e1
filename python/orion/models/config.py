"""Model configurations for the two supported families (GPT-2, Llama), from Hugging Face ``config.json``
files and from llama2.c checkpoint headers (reference/model-formats.md §1.1, §3).

Every constructor validates what the graph builders rely on and raises :class:`orion.ModelFormatError`
naming the file, the key and the expectation.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import ModelFormatError
from ..fileio import read_json

__all__ = ["GPT2Config", "LlamaConfig", "ModelConfig", "config_from_hf", "config_from_dict", "read_hf_config"]


def _err(source: str | None, msg: str) -> ModelFormatError:
    return ModelFormatError(f"{source}: {msg}" if source else msg)


def _pos_int(source, key, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _err(source, f"config key {key!r} must be a positive integer, got {value!r}")
    return value


@dataclass
class GPT2Config:
    """GPT-2: learned positions, pre-LayerNorm blocks, tanh-GELU MLP, biases everywhere, tied head."""
    vocab_size: int = 50257
    n_ctx: int = 1024
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int = 3072
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    bos_id: int | None = 50256
    eos_id: int | None = 50256
    family: str = field(default="gpt2", init=False)

    def __post_init__(self):
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def n_kv_heads(self) -> int:
        return self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.d_model

    def validate(self, source: str | None = None) -> None:
        for k in ("vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "d_ff"):
            _pos_int(source, k, getattr(self, k))
        if self.d_model % self.n_heads:
            raise _err(source, f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if not self.tie_embeddings:
            raise _err(source, "GPT-2 with an untied lm_head is not supported (expected tie_word_embeddings=true)")

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class LlamaConfig:
    """Llama / llama2.c: RMSNorm, RoPE (llama2.c adjacent-pair layout inside orion), SwiGLU, no biases."""
    vocab_size: int = 32000
    n_ctx: int = 2048
    d_model: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int = 32
    d_ff: int = 11008
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = False
    bos_id: int | None = 1
    eos_id: int | None = 2
    family: str = field(default="llama", init=False)

    def __post_init__(self):
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.head_dim * self.n_kv_heads

    def validate(self, source: str | None = None) -> None:
        for k in ("vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff"):
            _pos_int(source, k, getattr(self, k))
        if self.d_model % self.n_heads:
            raise _err(source, f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise _err(source, f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise _err(source, f"head_dim {self.head_dim} must be even for RoPE")
        if not self.rope_theta > 0:
            raise _err(source, f"rope_theta must be positive, got {self.rope_theta}")

    def to_dict(self) -> dict:
        return asdict(self)


ModelConfig = GPT2Config | LlamaConfig


def config_from_dict(d: dict) -> ModelConfig:
    """Inverse of ``cfg.to_dict()`` (used by the weight cache)."""
    d = dict(d)
    fam = d.pop("family", None)
    cls = {"gpt2": GPT2Config, "llama": LlamaConfig}.get(fam)
    if cls is None:
        raise ModelFormatError(f"unknown model family {fam!r} in cached config")
    return cls(**d)


def read_hf_config(path: str) -> dict:
    d = read_json(path, ModelFormatError,
                  "no such file (a Hugging Face checkpoint needs config.json next to model.safetensors)")
    if not isinstance(d, dict):
        raise ModelFormatError(f"{path}: expected a JSON object, got {type(d).__name__}")
    return d


def _get(d: dict, source: str, *keys: str, default: Any = KeyError) -> Any:
    for k in keys:
        if k in d and d[k] is not None:
            return d[k]
    if default is KeyError:
        raise _err(source, f"missing config key {keys[0]!r}" + (f" (or {', '.join(map(repr, keys[1:]))})"
                                                                 if len(keys) > 1 else ""))
    return default


def _first_id(v):
    if isinstance(v, list):
        return v[0] if v else None
    return v


def config_from_hf(d: dict, source: str = "config.json") -> ModelConfig:
    """A :class:`GPT2Config` or :class:`LlamaConfig` from a Hugging Face ``config.json`` dict."""
    mt = d.get("model_type")
    archs = d.get("architectures") or []
    if mt is None and archs:
        mt = {"GPT2LMHeadModel": "gpt2", "LlamaForCausalLM": "llama"}.get(archs[0])
    if mt == "gpt2":
        act = d.get("activation_function", "gelu_new")
        if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
            raise _err(source, f"unsupported GPT-2 activation_function {act!r} (expected 'gelu_new', the tanh GELU)")
        for k in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "add_cross_attention"):
            if d.get(k):
                raise _err(source, f"unsupported GPT-2 option {k}=true")
        if d.get("scale_attn_weights") is False:
            raise _err(source, "unsupported GPT-2 option scale_attn_weights=false")
        n_embd = _pos_int(source, "n_embd", _get(d, source, "n_embd", "hidden_size"))
        cfg = _build(GPT2Config, source,
            vocab_size=_pos_int(source, "vocab_size", _get(d, source, "vocab_size")),
            n_ctx=_pos_int(source, "n_positions", _get(d, source, "n_positions", "n_ctx")),
            d_model=n_embd,
            n_layers=_pos_int(source, "n_layer", _get(d, source, "n_layer", "num_hidden_layers")),
            n_heads=_pos_int(source, "n_head", _get(d, source, "n_head", "num_attention_heads")),
            d_ff=_pos_int(source, "n_inner", _get(d, source, "n_inner", default=4 * n_embd)),
            norm_eps=float(_get(d, source, "layer_norm_epsilon", default=1e-5)),
            tie_embeddings=bool(d.get("tie_word_embeddings", True)),
            bos_id=_first_id(d.get("bos_token_id", 50256)),
            eos_id=_first_id(d.get("eos_token_id", 50256)),
        )
        return cfg
    if mt == "llama":
        act = d.get("hidden_act", "silu")
        if act != "silu":
            raise _err(source, f"unsupported Llama hidden_act {act!r} (expected 'silu')")
        if d.get("rope_scaling"):
            raise _err(source, f"unsupported Llama rope_scaling {d['rope_scaling']!r} (plain RoPE only)")
        for k in ("attention_bias", "mlp_bias"):
            if d.get(k):
                raise _err(source, f"unsupported Llama option {k}=true (orion's Llama has no biases)")
        hidden = _pos_int(source, "hidden_size", _get(d, source, "hidden_size"))
        heads = _pos_int(source, "num_attention_heads", _get(d, source, "num_attention_heads"))
        hd = d.get("head_dim")
        if hd is not None and hd * heads != hidden:
            raise _err(source, f"head_dim {hd} * num_attention_heads {heads} != hidden_size {hidden} (unsupported)")
        cfg = _build(LlamaConfig, source,
            vocab_size=_pos_int(source, "vocab_size", _get(d, source, "vocab_size")),
            n_ctx=_pos_int(source, "max_position_embeddings", _get(d, source, "max_position_embeddings")),
            d_model=hidden, n_layers=_pos_int(source, "num_hidden_layers", _get(d, source, "num_hidden_layers")),
            n_heads=heads,
            n_kv_heads=_pos_int(source, "num_key_value_heads", _get(d, source, "num_key_value_heads", default=heads)),
            d_ff=_pos_int(source, "intermediate_size", _get(d, source, "intermediate_size")),
            norm_eps=float(_get(d, source, "rms_norm_eps", default=1e-6)),
            rope_theta=float(_get(d, source, "rope_theta", default=10000.0)),
            tie_embeddings=bool(d.get("tie_word_embeddings", False)),
            bos_id=_first_id(d.get("bos_token_id", 1)),
            eos_id=_first_id(d.get("eos_token_id", 2)),
        )
        return cfg
    raise _err(source, f"unsupported architecture: model_type {mt!r} architectures {archs!r} "
                       f"(supported: 'gpt2' / GPT2LMHeadModel, 'llama' / LlamaForCausalLM)")


def _build(cls, source, **kw):
    try:
        return cls(**kw)
    except ModelFormatError as e:
        raise _err(source, str(e)) from None


def hf_source(directory: str) -> str:
    return os.path.join(directory, "config.json")
