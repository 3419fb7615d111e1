"""The model being trained: its configuration is :class:`orion.models.config.LlamaConfig` (the one Llama
config of orion, every family's feature fields included), plus what ``orion train`` adds around it —
presets, the llama2.c-named constructor, state.json conversion, initialisation, import and export.

Parameters are fp32 master copies in the canonical names and ``[out, in]`` layout of
:func:`orion.models.loaders.expected_shapes` (``tok_emb``, ``layers.{i}.rms_att``/``wq``/``wk``/``wv``/``wo``/
``rms_ffn``/``w1``/``w2``/``w3``, the features' ``bq``/``bk``/``bv``, ``q_norm``/``k_norm``,
``rms_att_post``/``rms_ffn_post``, ``rms_final``, ``wcls`` when untied), so the inference code and its
float64 reference take them as they are. RoPE rows are llama2.c's adjacent pairs; Hugging Face's
rotate-half checkpoints (and fused Phi-3 tensors, Gemma's ``1 + w`` norms) are converted by the
inference loaders on import and by :func:`orion.models.loaders.canonical_to_hf` on export.
"""

from __future__ import annotations

import inspect
import math
import os
import struct

import numpy as np

from ..errors import ModelFormatError
from ..fileio import atomic_folder
from ..models.config import LlamaConfig, check_config_dict, config_from_dict
from ..models.loaders import expected_shapes, read_checkpoint
from . import checkpoint as ckpt_mod
from .errors import CheckpointError, TrainError
from .hf_layout import hf_model_files  # noqa: F401  (also orion.train.model.hf_model_files)
from .tokenizer_files import HF_TOKENIZER_FILES
from .tokenizer_files import tokenizer_files as files_of
from .writes import _check_writable, atomic_write, write_with

# the llama2.c names of the constructor / old state.json files -> LlamaConfig fields
LLAMA2C_NAMES = {"dim": "d_model", "hidden_dim": "d_ff", "seq_len": "n_ctx"}


def llama_config(dim: int = 128, n_layers: int = 4, n_heads: int = 4, n_kv_heads: int | None = None,
                 vocab_size: int = 512, hidden_dim: int | None = None, seq_len: int = 128, norm_eps: float = 1e-5,
                 rope_theta: float = 10000.0, tie_embeddings: bool = True, multiple_of: int = 32,
                 **features) -> LlamaConfig:
    """A :class:`LlamaConfig` from llama2.c's names (``hidden_dim`` None: 8d/3 rounded up to
    ``multiple_of``, llama2.c's rule); ``features``: any other LlamaConfig field."""
    if hidden_dim is None:
        hidden_dim = llama2c_hidden(dim, multiple_of)
    try:
        return LlamaConfig(vocab_size=vocab_size, n_ctx=seq_len, d_model=dim, n_layers=n_layers, n_heads=n_heads,
                           n_kv_heads=n_heads if n_kv_heads is None else n_kv_heads, d_ff=hidden_dim,
                           norm_eps=norm_eps, rope_theta=rope_theta, tie_embeddings=tie_embeddings, **features)
    except (ModelFormatError, TypeError) as e:
        raise TrainError(f"model config: {e}") from None


def llama2c_hidden(dim: int, multiple_of: int = 32) -> int:
    """llama2.c's MLP width: 8·dim/3 rounded up to a multiple of ``multiple_of``."""
    h = int(2 * (4 * dim) / 3)
    return multiple_of * ((h + multiple_of - 1) // multiple_of)


def resized(cfg: LlamaConfig, **over) -> LlamaConfig:
    """``cfg`` with llama2.c-named overrides (``dim``, ``n_layers``, ``n_heads``, ``n_kv_heads``, ``hidden_dim``,
    ``vocab_size``, ``seq_len``; the CLI's --dim/--layers/...): a new ``dim`` without ``hidden_dim`` takes
    llama2.c's hidden rule, and a head size that followed d_model/n_heads follows the new values."""
    if not over:
        return cfg
    d = cfg.to_dict()
    d.pop("family", None)
    if "dim" in over and "hidden_dim" not in over:
        over["hidden_dim"] = llama2c_hidden(over["dim"])
    if ("dim" in over or "n_heads" in over) and cfg.head_dim == cfg.d_model // cfg.n_heads:
        d["head_dim"] = None
    for k, v in over.items():
        d[LLAMA2C_NAMES.get(k, k)] = v
    try:
        return LlamaConfig(**d)
    except (ModelFormatError, TypeError) as e:
        raise TrainError(f"model config: {e}") from None


def config_from_state(d: dict, source: str = "state.json") -> LlamaConfig:
    """The ``"model"`` entry of a checkpoint's state.json: ``LlamaConfig.to_dict()``, or the older form with
    llama2.c names (dim, hidden_dim, seq_len, multiple_of), converted on read."""
    where = source if os.path.basename(source) == "state.json" else os.path.join(source, "state.json")
    if not isinstance(d, dict):
        raise CheckpointError(f"{where}: 'model' must be an object, got {type(d).__name__}")
    if "family" not in d:                                    # written before training used LlamaConfig
        known = set(inspect.signature(llama_config).parameters) - {"features"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise CheckpointError(f"{where}: unknown model keys {unknown} (expected {sorted(known)})")
        try:
            return llama_config(**d)
        except TrainError as e:
            raise CheckpointError(f"{where}: {e}") from None
    try:
        check_config_dict(d, where, "model.")           # an unknown key or a wrong type, named
    except ModelFormatError as e:
        raise CheckpointError(str(e)) from None
    try:
        cfg = config_from_dict(d, where)
    except (ModelFormatError, TypeError) as e:
        raise CheckpointError(f"{where}: model config: {e}") from None
    if cfg.family != "llama":
        raise CheckpointError(f"{where}: orion train trains Llama-style models, got family {cfg.family!r}")
    return cfg


PRESETS = {
    # the default of `orion train` (a few minutes on 2 cores in the simulator)
    "tiny": llama_config(dim=128, n_layers=4, n_heads=4, vocab_size=512, hidden_dim=352, seq_len=128),
    "micro": llama_config(dim=64, n_layers=2, n_heads=4, vocab_size=256, hidden_dim=160, seq_len=64),
    "stories260K": llama_config(dim=64, n_layers=5, n_heads=8, n_kv_heads=4, vocab_size=512, hidden_dim=172,
                                seq_len=512),
    "stories15M": llama_config(dim=288, n_layers=6, n_heads=6, vocab_size=32000, hidden_dim=768, seq_len=256),
    "stories42M": llama_config(dim=512, n_layers=8, n_heads=8, vocab_size=32000, hidden_dim=1376, seq_len=1024),
    "stories110M": llama_config(dim=768, n_layers=12, n_heads=12, vocab_size=32000, hidden_dim=2048, seq_len=1024),
}


def param_shapes(cfg: LlamaConfig) -> dict[str, tuple]:
    return expected_shapes(cfg)


def n_params(cfg: LlamaConfig) -> int:
    return sum(int(np.prod(s)) for s in param_shapes(cfg).values())


_ZERO_INIT = ("bq", "bk", "bv")


def init_params(cfg: LlamaConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """llama2.c's init: N(0, 0.02), N(0, 0.02/sqrt(2L)) for wo and w3, ones for norms (the factor they
    multiply by), zeros for q/k/v biases (fp32)."""
    rng = np.random.default_rng(seed)
    small = 0.02 / math.sqrt(2 * cfg.n_layers)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            out[name] = (np.zeros if name.rsplit(".", 1)[-1] in _ZERO_INIT else np.ones)(shape, np.float32)
        else:
            std = small if name.endswith((".wo", ".w3")) else 0.02
            out[name] = (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float32)
    return out


def check_params(cfg: LlamaConfig, params: dict, what: str = "weights") -> None:
    want = param_shapes(cfg)
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
def llama2c_unsupported(cfg: LlamaConfig) -> list[str]:
    """The features of ``cfg`` a llama2.c ``.bin`` cannot express (its header has only the plain Llama's)."""
    plain = LlamaConfig(vocab_size=cfg.vocab_size, n_ctx=cfg.n_ctx, d_model=cfg.d_model, n_layers=cfg.n_layers,
                        n_heads=cfg.n_heads, n_kv_heads=cfg.n_kv_heads, d_ff=cfg.d_ff)
    skip = {"vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "norm_eps", "rope_theta",
            "tie_embeddings", "bos_id", "eos_id", "eos_ids", "model_type", "family"}
    a, b = cfg.to_dict(), plain.to_dict()
    return [f"{k}={a[k]!r}" for k in a if k not in skip and a[k] != b[k]]


def write_llama2c(path: str, cfg: LlamaConfig, params: dict) -> None:
    """Legacy v0 format (what llama2.c's run.c reads), written atomically."""
    bad = llama2c_unsupported(cfg)
    if bad:
        raise TrainError(f"--export-bin: a llama2.c .bin cannot hold this model ({', '.join(bad)}); use --export-hf")
    L = cfg.n_layers
    V = cfg.vocab_size if cfg.tie_embeddings else -cfg.vocab_size
    parts = [struct.pack("<7i", cfg.d_model, cfg.d_ff, L, cfg.n_heads, cfg.n_kv_heads, V, cfg.n_ctx)]
    order = [params["tok_emb"]]
    for k in ("rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2", "w3"):
        order.append(np.stack([params[f"layers.{i}.{k}"] for i in range(L)]))
    order.append(params["rms_final"])
    ang = cfg.rope.angles(cfg.head_dim, np.arange(cfg.n_ctx)).T          # freq_cis tables [n_ctx, hd/2]
    order.extend((np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)))
    if not cfg.tie_embeddings:
        order.append(params["wcls"])
    with atomic_write(path) as f:
        f.write(parts[0])
        for a in order:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())


# ----------------------------------------------------------------------------------- Hugging Face
# the files themselves: hf_layout.hf_model_files (a checkpoint step folder writes them too)
def write_hf(folder: str, cfg: LlamaConfig, params: dict, tokenizer_files: dict | None = None,
             tokenizer_from: str | None = None) -> None:
    """A Hugging Face folder: config.json + model.safetensors (:func:`hf_model_files`) and the tokenizer's
    files (:mod:`orion.train.tokenizer_files`; ``tokenizer_from``: those of an HF folder), written as a
    hidden sibling folder renamed into place, so a kill never leaves new weights beside an old config.json.
    An existing folder is replaced only when it holds nothing but such files (an earlier export)."""
    folder = os.path.abspath(folder)
    _check_writable(folder)
    if os.path.exists(folder):
        if not os.path.isdir(folder):
            raise TrainError(f"--export-hf {folder}: is a file; give a folder path")
        ours = {"config.json", "model.safetensors", "tokenizer.bin", *HF_TOKENIZER_FILES}
        other = sorted(set(os.listdir(folder)) - ours)
        if other:
            raise TrainError(f"--export-hf {folder}: the folder holds other files ({', '.join(other[:4])}); "
                             f"export into a new or empty folder")
    writers, _ = hf_model_files(cfg, params)
    if tokenizer_files is None and tokenizer_from:
        tokenizer_files = files_of(None, tokenizer_from)
    for name, data in (tokenizer_files or {}).items():
        writers.setdefault(name, lambda f, data=data: f.write(data))
    with atomic_folder(folder) as tmp:
        for name, w in writers.items():
            write_with(os.path.join(tmp, name), w)


def load_pretrained(path: str) -> tuple[LlamaConfig, dict[str, np.ndarray]]:
    """A llama2.c ``.bin`` (v0/v1/v2) or a Hugging Face folder of any Llama-style family, read by
    :mod:`orion.models.loaders` (the inference loaders: canonical names, q/k rows in adjacent pairs, fused
    tensors split, Gemma's norm offset folded), or an ``orion train`` checkpoint folder (its latest step's
    weights), as fp32."""
    if os.path.isdir(path) and (os.path.isfile(os.path.join(path, ckpt_mod.LATEST)) or
                                os.path.isfile(os.path.join(path, "state.json"))):
        c = ckpt_mod.load(path)                              # an orion train checkpoint folder
        if c.state.get("lora"):
            raise CheckpointError(f"{path}: a LoRA run's checkpoint holds only adapters; start from its base model "
                                  f"({c.state.get('init') or 'a fresh init'}) and load the adapter instead")
        cfg = config_from_state(c.state["model"], path)
        check_params(cfg, c.params, path)
        return cfg, c.params
    try:
        ck = read_checkpoint(path)
    except ModelFormatError as e:
        raise CheckpointError(str(e)) from None
    if ck.config.family != "llama":
        raise CheckpointError(f"{path}: orion train trains Llama-style models; got a {ck.config.family} checkpoint")
    params = {k: np.array(v, dtype=np.float32) for k, v in ck.weights.items()}
    check_params(ck.config, params, path)
    return ck.config, params
