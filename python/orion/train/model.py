"""The Llama model being trained: configuration, parameter names/shapes, initialisation, and the
llama2.c ``.bin`` / Hugging Face safetensors import and export used by ``orion train``.

Parameters are fp32 master copies and ``[out, in]`` layout:
``tok_emb [V, d]``, ``layers.{i}.rms_att [d]``, ``layers.{i}.wq [q_dim, d]``, ``wk``/``wv``
``[kv_dim, d]``, ``wo [d, q_dim]``, ``rms_ffn [d]``, ``w1``/``w3 [h, d]``, ``w2 [d, h]``, ``rms_final [d]``
and, when the classifier is not tied to the embedding, ``wcls [V, d]`` — the canonical names of
:mod:`orion.models.loaders`, so the inference code and its float64 reference take them as they are.
RoPE is llama2.c's adjacent-pair layout; Hugging Face's rotate-half checkpoints are converted on
import/export (model-formats.md §3.1).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from dataclasses import dataclass

import numpy as np

from .. import safetensors as st
from .errors import CheckpointError

LAYER_PARAMS = ("rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3")


@dataclass(frozen=True)
class ModelConfig:
    dim: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None
    vocab_size: int = 512
    hidden_dim: int | None = None      # None: llama2.c rule (8d/3 rounded up to multiple_of)
    seq_len: int = 128                 # maximum context (and the training sequence length by default)
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = True
    multiple_of: int = 32

    def __post_init__(self):
        if self.n_kv_heads is None:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if self.hidden_dim is None:
            h = int(2 * (4 * self.dim) / 3)
            m = self.multiple_of
            object.__setattr__(self, "hidden_dim", m * ((h + m - 1) // m))
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads or (self.dim // self.n_heads) % 2:
            raise ValueError(f"model config: dim {self.dim} must split into {self.n_heads} heads of even size, and "
                             f"n_heads into n_kv_heads={self.n_kv_heads} groups")
        for k in ("dim", "n_layers", "n_heads", "vocab_size", "hidden_dim", "seq_len"):
            if int(getattr(self, k)) < 1:
                raise ValueError(f"model config: {k} must be >= 1")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def kv_dim(self) -> int:
        return self.head_dim * self.n_kv_heads

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})

    def param_shapes(self) -> dict[str, tuple]:
        d, h, kv, V = self.dim, self.hidden_dim, self.kv_dim, self.vocab_size
        shapes = {"tok_emb": (V, d)}
        for i in range(self.n_layers):
            p = f"layers.{i}."
            shapes.update({p + "rms_att": (d,), p + "wq": (d, d), p + "wk": (kv, d), p + "wv": (kv, d),
                           p + "wo": (d, d), p + "rms_ffn": (d,), p + "w1": (h, d), p + "w2": (d, h), p + "w3": (h, d)})
        shapes["rms_final"] = (d,)
        if not self.tie_embeddings:
            shapes["wcls"] = (V, d)
        return shapes

    def n_params(self) -> int:
        return sum(int(np.prod(s)) for s in self.param_shapes().values())


PRESETS = {
    # the default of `orion train` (a few minutes on 2 cores in the simulator)
    "tiny": ModelConfig(dim=128, n_layers=4, n_heads=4, vocab_size=512, hidden_dim=352, seq_len=128),
    "micro": ModelConfig(dim=64, n_layers=2, n_heads=4, vocab_size=256, hidden_dim=160, seq_len=64),
    "stories260K": ModelConfig(dim=64, n_layers=5, n_heads=8, n_kv_heads=4, vocab_size=512, hidden_dim=172,
                               seq_len=512),
    "stories15M": ModelConfig(dim=288, n_layers=6, n_heads=6, vocab_size=32000, hidden_dim=768, seq_len=256),
    "stories42M": ModelConfig(dim=512, n_layers=8, n_heads=8, vocab_size=32000, hidden_dim=1376, seq_len=1024),
    "stories110M": ModelConfig(dim=768, n_layers=12, n_heads=12, vocab_size=32000, hidden_dim=2048, seq_len=1024),
}


def init_params(cfg: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """llama2.c's init: N(0, 0.02), N(0, 0.02/sqrt(2L)) for wo and w3, ones for norms (fp32)."""
    rng = np.random.default_rng(seed)
    small = 0.02 / math.sqrt(2 * cfg.n_layers)
    out = {}
    for name, shape in cfg.param_shapes().items():
        if len(shape) == 1:
            out[name] = np.ones(shape, np.float32)
        else:
            std = small if name.endswith((".wo", ".w3")) else 0.02
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)
    return out


def check_params(cfg: ModelConfig, params: dict, what: str = "weights") -> None:
    want = cfg.param_shapes()
    missing = [k for k in want if k not in params]
    if missing:
        raise CheckpointError(f"{what}: missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    bad = [f"{k} {list(params[k].shape)} (expected {list(s)})" for k, s in want.items() if tuple(params[k].shape) != s]
    if bad:
        raise CheckpointError(f"{what}: wrong shapes: {'; '.join(bad[:4])}")
    for k in want:
        if not np.isfinite(params[k]).all():
            raise CheckpointError(f"{what}: tensor {k!r} contains NaN/Inf")


def classifier(params: dict) -> np.ndarray:
    return params.get("wcls", params["tok_emb"])


# ----------------------------------------------------------------------------------- llama2.c .bin
def _rope_freqs(cfg: ModelConfig) -> tuple[np.ndarray, np.ndarray]:
    hd = cfg.head_dim
    freqs = 1.0 / (cfg.rope_theta ** (np.arange(0, hd, 2)[: hd // 2].astype(np.float64) / hd))
    ang = np.outer(np.arange(cfg.seq_len), freqs)
    return np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)


def write_llama2c(path: str, cfg: ModelConfig, params: dict) -> None:
    """Legacy v0 format (what llama2.c's run.c reads), written atomically."""
    L = cfg.n_layers
    V = cfg.vocab_size if cfg.tie_embeddings else -cfg.vocab_size
    parts = [struct.pack("<7i", cfg.dim, cfg.hidden_dim, L, cfg.n_heads, cfg.n_kv_heads, V, cfg.seq_len)]
    order = [params["tok_emb"]]
    for k in ("rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"):
        order.append(np.stack([params[f"layers.{i}.{k}"] for i in range(L)]))
    order.append(params["rms_final"])
    order.extend(_rope_freqs(cfg))
    if not cfg.tie_embeddings:
        order.append(params["wcls"])
    from .checkpoint import atomic_write
    with atomic_write(path) as f:
        f.write(parts[0])
        for a in order:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


# ----------------------------------------------------------------------------------- Hugging Face
def _to_hf(w: np.ndarray, heads: int) -> np.ndarray:      # adjacent pairs -> rotate-half rows
    out, d = w.shape
    return w.reshape(heads, out // heads // 2, 2, d).swapaxes(1, 2).reshape(out, d)


_HF = {"rms_att": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
       "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "rms_ffn": "post_attention_layernorm",
       "w1": "mlp.gate_proj", "w2": "mlp.down_proj", "w3": "mlp.up_proj"}


def write_hf(folder: str, cfg: ModelConfig, params: dict) -> None:
    """config.json + model.safetensors (fp32, rotate-half q/k rows, ``model.`` prefixed names)."""
    os.makedirs(folder, exist_ok=True)
    t = {"model.embed_tokens.weight": params["tok_emb"], "model.norm.weight": params["rms_final"]}
    for i in range(cfg.n_layers):
        for k, hk in _HF.items():
            w = params[f"layers.{i}.{k}"]
            if k == "wq":
                w = _to_hf(w, cfg.n_heads)
            elif k == "wk":
                w = _to_hf(w, cfg.n_kv_heads)
            t[f"model.layers.{i}.{hk}.weight"] = w
    if not cfg.tie_embeddings:
        t["lm_head.weight"] = params["wcls"]
    hc = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": cfg.dim,
          "intermediate_size": cfg.hidden_dim, "num_hidden_layers": cfg.n_layers,
          "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.n_kv_heads, "vocab_size": cfg.vocab_size,
          "max_position_embeddings": cfg.seq_len, "rms_norm_eps": cfg.norm_eps, "rope_theta": cfg.rope_theta,
          "tie_word_embeddings": cfg.tie_embeddings, "hidden_act": "silu", "torch_dtype": "float32",
          "bos_token_id": 1, "eos_token_id": 2}
    from .checkpoint import atomic_write
    with atomic_write(os.path.join(folder, "model.safetensors")) as f:
        st.write(f, {k: np.ascontiguousarray(v, np.float32) for k, v in t.items()}, {"format": "pt"})
    with atomic_write(os.path.join(folder, "config.json"), "w") as f:
        json.dump(hc, f, indent=2)


def load_pretrained(path: str) -> tuple[ModelConfig, dict[str, np.ndarray]]:
    """llama2.c ``.bin`` (v0/v1/v2) or a Hugging Face Llama folder, read by :mod:`orion.models.loaders`
    (the inference loaders: same canonical names, HF q/k rows un-permuted to adjacent pairs), or an
    ``orion train`` checkpoint folder (its latest step's weights), as fp32."""
    from ..errors import ModelFormatError
    from ..models.loaders import read_checkpoint
    from . import checkpoint as ckpt_mod
    if os.path.isdir(path) and (os.path.isfile(os.path.join(path, ckpt_mod.LATEST)) or
                                os.path.isfile(os.path.join(path, "state.json"))):
        c = ckpt_mod.load(path)                              # an orion train checkpoint folder
        if c.state.get("lora"):
            raise CheckpointError(f"{path}: a LoRA run's checkpoint holds only adapters; start from its base model "
                                  f"({c.state.get('init') or 'a fresh init'}) and load the adapter instead")
        cfg = ModelConfig.from_dict(c.state["model"])
        check_params(cfg, c.params, path)
        return cfg, c.params
    try:
        ck = read_checkpoint(path)
    except ModelFormatError as e:
        raise CheckpointError(str(e)) from None
    cfg = from_models_config(ck.config)
    params = {k: np.array(v, dtype=np.float32) for k, v in ck.weights.items()}
    check_params(cfg, params, path)
    return cfg, params


# ------------------------------------------------------------- orion.models interoperability
def from_models_config(c) -> ModelConfig:
    """An ``orion.models.config.LlamaConfig`` as the trainer's :class:`ModelConfig`."""
    if getattr(c, "family", "llama") != "llama":
        raise CheckpointError(f"orion train trains Llama models; got a {getattr(c, 'family', '?')} config")
    return ModelConfig(dim=c.d_model, n_layers=c.n_layers, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads,
                       vocab_size=c.vocab_size, hidden_dim=c.d_ff, seq_len=c.n_ctx, norm_eps=c.norm_eps,
                       rope_theta=c.rope_theta, tie_embeddings=c.tie_embeddings)


def to_models_config(cfg: ModelConfig):
    """The trainer's config as ``orion.models.config.LlamaConfig`` (None when that package is absent)."""
    try:
        from ..models.config import LlamaConfig
    except ImportError:
        return None
    return LlamaConfig(vocab_size=cfg.vocab_size, n_ctx=cfg.seq_len, d_model=cfg.dim, n_layers=cfg.n_layers,
                       n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, d_ff=cfg.hidden_dim, norm_eps=cfg.norm_eps,
                       rope_theta=cfg.rope_theta, tie_embeddings=cfg.tie_embeddings)
