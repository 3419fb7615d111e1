"""The model configuration dataclasses of the two graph families (:class:`GPT2Config`, and
:class:`LlamaConfig` for Llama and its descendants): what the graph builders rely on, validated by every
constructor (:class:`orion.ModelFormatError` naming the file, the key and the expectation). Below the family
readers (:mod:`orion.models.families`), which build them; :mod:`orion.models.config` re-exports them."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..errors import ModelFormatError
from .rope import Rope

__all__ = ["GPT2Config", "LlamaConfig", "ModelConfig"]


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
    def model_type(self) -> str:
        return "gpt2"

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
    """The Llama architecture and its descendants (Llama 2/3, SmolLM, Qwen 2.5/3, Mistral, Gemma 3, Phi-3,
    llama2.c): pre-norm decoder blocks with RMSNorm, RoPE (llama2.c adjacent-pair layout inside orion),
    grouped-query attention and a gated MLP. ``model_type`` names the checkpoint's variant (tensor names,
    export); the other fields are the math, each read from the file or refused (families/).

    Norm weights are stored as the factor they multiply by: Gemma's ``(1 + w)`` is folded in on load
    (``norm_offset`` = 1 says to subtract it again on export)."""
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
    model_type: str = "llama"
    head_dim: int | None = None               # None: d_model // n_heads
    rope_scaling: dict | None = None          # Rope fields besides theta (type, factor, ...); None: default
    local_rope_theta: float | None = None     # sliding-window layers' RoPE base (Gemma 3), default type
    sliding_window: int | None = None         # keys j with i - j < window are visible to query i
    layer_types: list | None = None           # per layer "full" | "sliding"; None: all full
    qkv_bias: bool = False                    # Qwen 2.5
    qk_norm: bool = False                     # per-head RMSNorm on q and k before RoPE (Qwen 3, Gemma 3)
    sandwich_norms: bool = False              # norms on the attention and MLP outputs too (Gemma 3)
    mlp_act: str = "silu"                     # gate activation: "silu" (SwiGLU) | "gelu_tanh" (GeGLU)
    embed_scale: float = 1.0                  # token embeddings are multiplied by it (Gemma: sqrt(d))
    attn_scale: float | None = None           # query scaling; None: head_dim ** -0.5
    final_softcap: float | None = None        # logits = cap * tanh(logits / cap)
    norm_offset: float = 0.0                  # the checkpoint stores norm weights as (factor - offset)
    eos_ids: list | None = None               # every end-of-sequence id (the first is eos_id)
    family: str = field(default="llama", init=False)

    def __post_init__(self):
        if self.head_dim is None:
            if isinstance(self.n_heads, int) and self.n_heads > 0 and isinstance(self.d_model, int) and \
                    self.d_model % self.n_heads:
                raise _err(None, f"d_model {self.d_model} is not divisible by n_heads {self.n_heads} (and no "
                                 f"head_dim is given)")
            self.head_dim = self.d_model // self.n_heads if isinstance(self.n_heads, int) and self.n_heads > 0 else 0
        if self.eos_ids is None:
            self.eos_ids = [self.eos_id] if self.eos_id is not None else []
        self.validate()

    @property
    def q_dim(self) -> int:
        return self.head_dim * self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.head_dim * self.n_kv_heads

    @property
    def rope(self):
        """The global layers' :class:`orion.models.rope.Rope`."""
        return Rope(theta=self.rope_theta, **(self.rope_scaling or {}))

    def layer_sliding(self, layer: int) -> bool:
        return bool(self.layer_types) and self.layer_types[layer] == "sliding"

    def layer_rope(self, layer: int):
        """The RoPE of ``layer`` (Gemma 3's sliding layers have their own base, unscaled)."""
        if self.local_rope_theta is not None and self.layer_sliding(layer):
            return Rope(theta=self.local_rope_theta)
        return self.rope

    def layer_ropes(self) -> list:
        """:meth:`layer_rope` of every layer, one shared object per kind of layer (it depends on the layer
        only through :meth:`layer_sliding`): the per-step feeds of a 30-layer model built 31 Ropes a token."""
        kinds: dict = {}
        return [kinds[s] if s in kinds else kinds.setdefault(s, self.layer_rope(l))
                for l, s in enumerate(self.layer_sliding(l) for l in range(self.n_layers))]

    @property
    def query_scale(self) -> float:
        return self.attn_scale if self.attn_scale is not None else self.head_dim ** -0.5

    def validate(self, source: str | None = None) -> None:
        for k in ("vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "head_dim"):
            _pos_int(source, k, getattr(self, k))
        if self.n_heads % self.n_kv_heads:
            raise _err(source, f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise _err(source, f"head_dim {self.head_dim} must be even for RoPE")
        if not self.rope_theta > 0:
            raise _err(source, f"rope_theta must be positive, got {self.rope_theta}")
        try:
            self.rope
        except (TypeError, ValueError) as e:
            raise _err(source, f"rope_scaling {self.rope_scaling!r}: {e}") from None
        if self.mlp_act not in ("silu", "gelu_tanh"):
            raise _err(source, f"mlp_act must be 'silu' or 'gelu_tanh', got {self.mlp_act!r}")
        if self.layer_types is not None:
            if len(self.layer_types) != self.n_layers or any(t not in ("full", "sliding") for t in self.layer_types):
                raise _err(source, f"layer_types must list 'full' or 'sliding' for each of the {self.n_layers} "
                                   f"layers, got {self.layer_types!r}")
            if "sliding" in self.layer_types and self.sliding_window is None:
                raise _err(source, "sliding layers need a sliding_window")
        if self.sliding_window is not None:
            _pos_int(source, "sliding_window", self.sliding_window)
        for k in ("embed_scale", "attn_scale", "final_softcap", "local_rope_theta"):
            v = getattr(self, k)
            if v is not None and not (isinstance(v, (int, float)) and v > 0):
                raise _err(source, f"{k} must be a positive number, got {v!r}")

    def to_dict(self) -> dict:
        return asdict(self)


ModelConfig = GPT2Config | LlamaConfig


def _build(cls, source, **kw):
    try:
        return cls(**kw)
    except ModelFormatError as e:
        raise _err(source, str(e)) from None
