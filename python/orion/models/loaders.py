"""Checkpoint loaders → canonical weights.

Canonical weights are a flat ``{name: array}`` dict in the ANE orientation (every matrix ``[out, in]``):

GPT-2: ``wte [V, d]``, ``wpe [P, d]``, per layer ``h.{i}.ln1.g/.b``, ``h.{i}.wqkv [3d, d]`` (rows q, k, v),
``h.{i}.bqkv [3d]``, ``h.{i}.wo [d, d]``, ``h.{i}.bo``, ``h.{i}.ln2.g/.b``, ``h.{i}.wfc [f, d]``, ``h.{i}.bfc``,
``h.{i}.wproj [d, f]``, ``h.{i}.bproj``, then ``ln_f.g/.b``.

Llama: ``tok_emb [V, d]``, per layer ``layers.{i}.rms_att``, ``.wq [d, d]``, ``.wk [kv, d]``, ``.wv [kv, d]``,
``.wo [d, d]``, ``.rms_ffn``, ``.w1 [f, d]``, ``.w2 [d, f]``, ``.w3 [f, d]``, then ``rms_final`` and, when
untied, ``wcls [V, d]``. Wq/Wk rows are in llama2.c's adjacent-pair RoPE layout (HF checkpoints are
un-permuted on load).

Sources: Hugging Face folders (``config.json`` + ``model.safetensors`` or a sharded index; GPT-2 with
or without the ``transformer.`` prefix, Conv1D ``[in, out]`` matrices transposed) and llama2.c ``.bin``
files (legacy v0 header, versioned v1 fp32 and v2 Q8_0). :func:`load_weights` converts once to fp16
and caches the result on disk keyed by the sources' content hash.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import struct
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import ModelFormatError
from .config import LlamaConfig, ModelConfig, config_from_dict, config_from_hf, read_hf_config
from .families import family_module
from .families.gpt2 import LAYER as _GPT2_LAYER
from ..fileio import parse_json, prune_stale_temps, read_json, write_bytes_atomic
from ..native.safetensors import SafetensorsFile, write_safetensors

log = logging.getLogger("orion")

__all__ = ["Checkpoint", "read_checkpoint", "load_weights", "expected_shapes", "cache_dir",
           "hf_to_canonical", "canonical_to_hf", "hf_tensor_name", "to_canonical_tensor", "to_hf_tensor",
           "read_llama2c", "LLAMA2C_MAGIC", "CONVERTER_VERSION"]

CONVERTER_VERSION = "orion-weights-2"   # 2: Llama-family variants (norm offsets folded)
LLAMA2C_MAGIC = 0x616B3432


@dataclass
class Checkpoint:
    config: ModelConfig
    weights: dict                       # canonical name -> array (float32 from read_checkpoint, float16 cached)
    kind: str                           # "hf" | "llama2c-v0" | "llama2c-v1" | "llama2c-v2"
    path: str                           # the file or folder given
    files: list = field(default_factory=list)   # source files whose content defines the checkpoint
    cache_file: str | None = None
    source_names: dict = field(default_factory=dict)   # canonical name -> the file's own name (for messages)


# -------------------------------------------------------------------------------- expected shapes
def expected_shapes(cfg: ModelConfig) -> dict[str, tuple]:
    d, f, L = cfg.d_model, cfg.d_ff, cfg.n_layers
    out: dict[str, tuple] = {}
    if cfg.family == "gpt2":
        out["wte"] = (cfg.vocab_size, d)
        out["wpe"] = (cfg.n_ctx, d)
        for i in range(L):
            p = f"h.{i}."
            out.update({p + "ln1.g": (d,), p + "ln1.b": (d,), p + "wqkv": (3 * d, d), p + "bqkv": (3 * d,),
                        p + "wo": (d, d), p + "bo": (d,), p + "ln2.g": (d,), p + "ln2.b": (d,),
                        p + "wfc": (f, d), p + "bfc": (f,), p + "wproj": (d, f), p + "bproj": (d,)})
        out["ln_f.g"] = (d,)
        out["ln_f.b"] = (d,)
    else:
        kv, qd, hd = cfg.kv_dim, cfg.q_dim, cfg.head_dim
        out["tok_emb"] = (cfg.vocab_size, d)
        for i in range(L):
            p = f"layers.{i}."
            out.update({p + "rms_att": (d,), p + "wq": (qd, d), p + "wk": (kv, d), p + "wv": (kv, d),
                        p + "wo": (d, qd), p + "rms_ffn": (d,), p + "w1": (f, d), p + "w2": (d, f), p + "w3": (f, d)})
            if cfg.qkv_bias:
                out.update({p + "bq": (qd,), p + "bk": (kv,), p + "bv": (kv,)})
            if cfg.qk_norm:
                out.update({p + "q_norm": (hd,), p + "k_norm": (hd,)})
            if cfg.sandwich_norms:
                out.update({p + "rms_att_post": (d,), p + "rms_ffn_post": (d,)})
        out["rms_final"] = (d,)
        if not cfg.tie_embeddings:
            out["wcls"] = (cfg.vocab_size, d)
    return out


def check_weights(cfg: ModelConfig, w: dict, source: str, shown=None) -> None:
    """Names and shapes of canonical weights ``w`` against ``cfg``. ``shown``: canonical name -> the name the
    user's file has for it (messages name what the user can find in the file, never orion's own names)."""
    name = shown or (lambda k: k)
    exp = expected_shapes(cfg)
    missing = [name(k) for k in exp if k not in w]
    if missing:
        raise ModelFormatError(f"{source}: missing tensor(s) {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    extra = [name(k) for k in w if k not in exp]
    if extra:
        raise ModelFormatError(f"{source}: unexpected tensor(s) {extra[:5]}")
    for k, shape in exp.items():
        if tuple(w[k].shape) != shape:
            raise ModelFormatError(f"{source}: tensor {name(k)!r} has shape {list(w[k].shape)}, expected "
                                   f"{list(shape)} for the configuration")


# ------------------------------------------------------------------------------------- HF naming
_GPT2_CONV1D = {"wqkv", "wo", "wfc", "wproj"}        # stored [in, out]
_GPT2_IGNORE = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")
_LLAMA_TOP = {"model.embed_tokens.weight": "tok_emb", "model.norm.weight": "rms_final", "lm_head.weight": "wcls"}
_LLAMA_IGNORE = re.compile(r"^model\.layers\.\d+\.self_attn\.rotary_emb\.inv_freq$")


def _hf_name_map(cfg: ModelConfig, names: list[str], source: str) -> dict[str, str]:
    """HF tensor name -> canonical name (or, for a fused tensor, a tuple of (name, rows)); raises on
    unknown names."""
    m: dict = {}
    unknown = []
    layer_map = family_module(cfg.model_type).layer_tensors(cfg) if cfg.family == "llama" else {}
    for n in names:
        if cfg.family == "gpt2":
            base = n[len("transformer."):] if n.startswith("transformer.") else n
            if base in ("wte.weight", "wpe.weight"):
                m[n] = base.split(".")[0]
            elif base in ("ln_f.weight", "ln_f.bias"):
                m[n] = "ln_f." + ("g" if base.endswith("weight") else "b")
            elif n == "lm_head.weight":
                m[n] = "lm_head"
            elif _GPT2_IGNORE.match(base):
                m[n] = ""
            else:
                mm = re.match(r"^h\.(\d+)\.(.+)$", base)
                if mm and mm.group(2) in _GPT2_LAYER and int(mm.group(1)) < cfg.n_layers:
                    m[n] = f"h.{int(mm.group(1))}.{_GPT2_LAYER[mm.group(2)]}"
                else:
                    unknown.append(n)
        else:
            if n in _LLAMA_TOP:
                m[n] = _LLAMA_TOP[n]
            elif _LLAMA_IGNORE.match(n):
                m[n] = ""
            else:
                mm = re.match(r"^model\.layers\.(\d+)\.(.+)$", n)
                spec = layer_map.get(mm.group(2)) if mm else None
                if spec is not None and int(mm.group(1)) < cfg.n_layers:
                    i = int(mm.group(1))
                    m[n] = tuple((f"layers.{i}.{k}", rows) for k, rows in spec) if isinstance(spec, tuple) \
                        else f"layers.{i}.{spec}"
                else:
                    unknown.append(n)
    if unknown:
        raise ModelFormatError(f"{source}: unknown tensor name(s) for a {cfg.family} checkpoint: {unknown[:5]}"
                               f"{' ...' if len(unknown) > 5 else ''}")
    return m


def hf_tensor_name(cfg: ModelConfig, canon: str, prefix: str = "") -> str:
    """The Hugging Face name of canonical tensor ``canon`` in ``cfg``'s family (the inverse of
    :func:`_hf_name_map`; ``prefix``: GPT-2's optional ``transformer.``). A part of a fused tensor (Phi-3's
    qkv_proj) is named as that tensor with its rows: ``model.layers.0.self_attn.qkv_proj.weight (k rows)``."""
    if cfg.family == "gpt2":
        if canon in ("wte", "wpe"):
            return f"{prefix}{canon}.weight"
        if canon.startswith("ln_f."):
            return f"{prefix}ln_f.{'weight' if canon.endswith('g') else 'bias'}"
        inv = {v: k for k, v in _GPT2_LAYER.items()}
        parts = canon.split(".", 2)
        return f"{prefix}h.{parts[1]}.{inv[parts[2]]}" if len(parts) == 3 and parts[2] in inv else canon
    top = {v: k for k, v in _LLAMA_TOP.items()}
    if canon in top:
        return top[canon]
    parts = canon.split(".", 2)
    if len(parts) != 3 or parts[0] != "layers":
        return canon
    for hf, spec in family_module(cfg.model_type).layer_tensors(cfg).items():
        if spec == parts[2]:
            return f"model.layers.{parts[1]}.{hf}"
        if isinstance(spec, tuple) and parts[2] in [k for k, _ in spec]:
            return _fused_part(f"model.layers.{parts[1]}.{hf}", parts[2])
    return canon


_FUSED_ROLE = {"wq": "q", "wk": "k", "wv": "v", "w1": "gate", "w3": "up"}


def _fused_part(hf: str, canon: str) -> str:
    """How messages name the rows of fused tensor ``hf`` that hold canonical ``canon`` (``...qkv_proj.weight
    (k rows)``)."""
    key = canon.rsplit(".", 1)[-1]
    return f"{hf} ({_FUSED_ROLE.get(key, key)} rows)"


def permute_rotate_half_to_adjacent(w: np.ndarray, n_heads: int) -> np.ndarray:
    """HF q_proj/k_proj rows (rotate-half RoPE) -> Meta/llama2.c rows (adjacent pairs): the inverse of
    llama2.c export.py's ``permute``: view [heads, 2, hd/2, in], swap the middle axes."""
    rows, cols = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(w.reshape(n_heads, 2, hd // 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols))


def permute_adjacent_to_rotate_half(w: np.ndarray, n_heads: int) -> np.ndarray:
    rows, cols = w.shape
    hd = rows // n_heads
    return np.ascontiguousarray(w.reshape(n_heads, hd // 2, 2, cols).transpose(0, 2, 1, 3).reshape(rows, cols))


_NORMS = ("rms_att", "rms_ffn", "rms_att_post", "rms_ffn_post", "q_norm", "k_norm", "rms_final")


def _rope_heads(cfg, key: str) -> int:
    """How many RoPE heads the rows of a canonical Llama tensor hold (0: not rotated)."""
    return {"wq": cfg.n_heads, "bq": cfg.n_heads, "wk": cfg.n_kv_heads, "bk": cfg.n_kv_heads,
            "q_norm": 1, "k_norm": 1}.get(key, 0)


def to_canonical_tensor(cfg, name: str, arr: np.ndarray) -> np.ndarray:
    """An HF Llama-family tensor in orion's form: q/k rows (and their biases and per-head norm weights)
    from rotate-half to llama2.c's adjacent pairs; norm weights as the factor they multiply by
    (Gemma's ``1 + w``, computed in float32 as transformers does)."""
    key = name.rsplit(".", 1)[-1]
    heads = _rope_heads(cfg, key)
    if heads:
        arr = permute_rotate_half_to_adjacent(arr.reshape(arr.shape[0], -1), heads).reshape(arr.shape)
    if key in _NORMS and cfg.norm_offset:
        arr = (arr + np.float32(cfg.norm_offset)).astype(np.float32)
    return arr


def to_hf_tensor(cfg, name: str, arr: np.ndarray) -> np.ndarray:
    """The inverse of :func:`to_canonical_tensor`."""
    key = name.rsplit(".", 1)[-1]
    if key in _NORMS and cfg.norm_offset:
        arr = (np.asarray(arr, np.float32) - np.float32(cfg.norm_offset)).astype(np.float32)
    heads = _rope_heads(cfg, key)
    if heads:
        arr = permute_adjacent_to_rotate_half(arr.reshape(arr.shape[0], -1), heads).reshape(arr.shape)
    return arr


def _store(arr: np.ndarray, name: str, source: str, fp16: bool) -> np.ndarray:
    if not fp16:
        return arr
    return to_fp16(arr, name, source)


def to_fp16(arr, name: str, source: str) -> np.ndarray:
    """A weight as the programs hold it: fp16, refusing values beyond its range (no silent inf) [C37]."""
    a32 = np.asarray(arr, np.float32)
    if np.abs(a32).max(initial=0.0) > 65504:
        raise ModelFormatError(f"{source}: tensor {name!r} has values beyond the fp16 range (+-65504) [C37]")
    return a32.astype(np.float16)


_LAYER_INDEX = re.compile(r"(?:^|\.)(?:layers|h)\.(\d{1,12})\.")


def check_depth(cfg: ModelConfig, names, source: str) -> None:
    """The configuration's layer count against the layers the tensor names hold, before anything is sized
    from it (a config.json saying 10^9 layers would otherwise build per-layer tables for minutes)."""
    layer_of = {n: int(m.group(1)) for n in names if (m := _LAYER_INDEX.search(n))}
    have = max(layer_of.values()) + 1 if layer_of else 0
    if cfg.n_layers != have:
        beyond = sorted(n for n, i in layer_of.items() if i >= cfg.n_layers)[:3]
        raise ModelFormatError(f"{source}: the configuration says {cfg.n_layers} layers (num_hidden_layers / n_layer) "
                               f"but the weights hold {have} (layers 0..{have - 1}"
                               f"{'; beyond the configuration: ' + ', '.join(beyond) if beyond else ''}); the "
                               f"config.json does not belong to these weights")


def hf_to_canonical(cfg: ModelConfig, tensors: dict, source: str, shapes: dict | None = None,
                    fp16: bool = False, source_names: dict | None = None) -> dict:
    """Maps HF-named tensors (arrays, or zero-arg callables returning arrays) to canonical float32 arrays,
    validating names and shapes against ``cfg``. ``fp16``: each tensor is range-checked and stored as fp16
    as soon as it is converted, so a big checkpoint never exists in memory as float32 all at once.
    ``source_names``: filled with canonical name -> the file's name (what messages about a tensor say)."""
    names = list(tensors)
    check_depth(cfg, names, source)
    nmap = _hf_name_map(cfg, names, source)
    shown = {} if source_names is None else source_names
    for hf, canon in nmap.items():
        if isinstance(canon, tuple):
            for k, _ in canon:
                shown[k] = _fused_part(hf, k)
        elif canon:
            shown.setdefault(canon, hf)
    prefix = "transformer." if any(n.startswith("transformer.") for n in names) else ""

    def file_name(k: str) -> str:
        return shown.get(k) or hf_tensor_name(cfg, k, prefix)
    exp = expected_shapes(cfg)
    out: dict[str, np.ndarray] = {}
    lm_head = None
    d = cfg.d_model
    for hf, canon in nmap.items():
        if not canon:
            continue
        t = tensors[hf]
        arr = t() if callable(t) else t
        shape = tuple(arr.shape)
        if isinstance(canon, tuple):                 # a fused projection: rows of each part in order
            rows = sum(r for _, r in canon)
            want = (rows,) + tuple(exp[canon[0][0]][1:])
            if shape != want:
                raise ModelFormatError(f"{source}: fused tensor {hf!r} has shape {list(shape)}, expected {list(want)} "
                                       f"({' | '.join(f'{k.rsplit(chr(46), 1)[-1]} {r}' for k, r in canon)} rows) "
                                       f"for the configuration")
            arr, r0 = np.asarray(arr, np.float32), 0
            for k, r in canon:
                out[k] = _store(to_canonical_tensor(cfg, k, arr[r0:r0 + r]), file_name(k), source, fp16)
                r0 += r
            continue
        if canon == "lm_head":
            if shape != (cfg.vocab_size, d):
                raise ModelFormatError(f"{source}: tensor {hf!r} has shape {list(shape)}, expected "
                                       f"[{cfg.vocab_size}, {d}]")
            lm_head = (hf, arr)
            continue
        if canon == "wcls" and cfg.family == "llama" and cfg.tie_embeddings:
            lm_head = (hf, arr)
            continue
        want = exp.get(canon)
        if want is None:
            raise ModelFormatError(f"{source}: tensor {hf!r} is not used by this configuration")
        key = canon.rsplit(".", 1)[-1]
        if cfg.family == "gpt2" and key in _GPT2_CONV1D:
            if shape != want[::-1]:
                raise ModelFormatError(f"{source}: tensor {hf!r} has shape {list(shape)}, expected {list(want[::-1])} "
                                       f"(GPT-2 Conv1D layout [in, out]) for the configuration")
            arr = np.ascontiguousarray(np.asarray(arr, np.float32).T)
        else:
            if shape != want:
                raise ModelFormatError(f"{source}: tensor {hf!r} has shape {list(shape)}, expected {list(want)} "
                                       f"for the configuration")
            arr = np.asarray(arr, np.float32)
            if cfg.family == "llama":
                arr = to_canonical_tensor(cfg, canon, arr)
        out[canon] = _store(arr, hf, source, fp16)
    if cfg.family == "gpt2" and lm_head is not None and "wte" in out:
        if not np.array_equal(np.asarray(lm_head[1], np.float32), out["wte"]):
            raise ModelFormatError(f"{source}: tensor {lm_head[0]!r} differs from wte.weight; GPT-2 with an untied "
                                   f"head is not supported")
    if cfg.family == "llama" and cfg.tie_embeddings and lm_head is not None and "tok_emb" in out:
        if not np.array_equal(np.asarray(lm_head[1], np.float32), out["tok_emb"]):
            raise ModelFormatError(f"{source}: config says tie_word_embeddings=true but {lm_head[0]!r} differs from "
                                   f"model.embed_tokens.weight")
    check_weights(cfg, out, source, file_name)
    return out


def canonical_to_hf(cfg: ModelConfig, w: dict, prefix: bool = False, lm_head: bool = False) -> dict:
    """Canonical weights -> HF-named arrays (the inverse of :func:`hf_to_canonical`; used by tests and
    for exporting)."""
    out = {}
    if cfg.family == "gpt2":
        pre = "transformer." if prefix else ""
        inv = {v: k for k, v in _GPT2_LAYER.items()}
        for k, a in w.items():
            if k in ("wte", "wpe"):
                out[pre + k + ".weight"] = a
            elif k.startswith("ln_f."):
                out[pre + "ln_f." + ("weight" if k.endswith("g") else "bias")] = a
            else:
                _, i, key = k.split(".", 2)
                out[f"{pre}h.{i}.{inv[key]}"] = np.ascontiguousarray(a.T) if key in _GPT2_CONV1D else a
        if lm_head:
            out["lm_head.weight"] = w["wte"]
    else:
        layer = family_module(cfg.model_type).layer_tensors(cfg)
        inv = {v: k for k, v in layer.items() if isinstance(v, str)}
        fused = {v: k for k, v in layer.items() if isinstance(v, tuple)}
        for k, a in w.items():
            if k == "tok_emb":
                out["model.embed_tokens.weight"] = a
            elif k == "rms_final":
                out["model.norm.weight"] = to_hf_tensor(cfg, k, a)
            elif k == "wcls":
                out["lm_head.weight"] = a
            else:
                _, i, key = k.split(".", 2)
                if key in inv:
                    out[f"model.layers.{i}.{inv[key]}"] = to_hf_tensor(cfg, k, a)
        for parts, hf in fused.items():
            for i in range(cfg.n_layers):
                out[f"model.layers.{i}.{hf}"] = np.concatenate([to_hf_tensor(cfg, key, w[f"layers.{i}.{key}"])
                                                                for key, _ in parts], axis=0)
        if lm_head and cfg.tie_embeddings:
            out["lm_head.weight"] = w["tok_emb"]
    return out


def _read_hf(directory: str, fp16: bool = False) -> Checkpoint:
    cfg_path = os.path.join(directory, "config.json")
    cfg = config_from_hf(read_hf_config(cfg_path), cfg_path)
    single = os.path.join(directory, "model.safetensors")
    index = os.path.join(directory, "model.safetensors.index.json")
    files = [cfg_path]
    tensors: dict = {}
    if os.path.exists(single):
        st = SafetensorsFile(single)
        files.append(single)
        for n in st.names:
            tensors[n] = (lambda st=st, n=n: st.get(n))
    elif os.path.exists(index):
        idx = read_json(index, ModelFormatError, invalid="malformed safetensors index")
        wm = idx.get("weight_map") if isinstance(idx, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.endswith(".safetensors")
                                               for k, v in wm.items()):
            raise ModelFormatError(f"{index}: malformed safetensors index: 'weight_map' must map tensor names to "
                                   f".safetensors file names, got {str(wm)[:200]}")
        opened: dict[str, SafetensorsFile] = {}
        files.append(index)
        for n, fn in wm.items():
            if fn not in opened:
                p = os.path.join(directory, os.path.basename(fn))
                opened[fn] = SafetensorsFile(p)
                files.append(p)
            st = opened[fn]
            if n not in st:
                raise ModelFormatError(f"{st.path}: index says tensor {n!r} is here but the file has no such tensor")
            tensors[n] = (lambda st=st, n=n: st.get(n))
    else:
        if any(os.path.exists(os.path.join(directory, x)) for x in ("pytorch_model.bin", "model.bin")):
            raise ModelFormatError(f"{directory}: only pickled PyTorch weights found; orion reads model.safetensors "
                                   f"(convert with safetensors first)")
        raise ModelFormatError(f"{single}: no such file (expected model.safetensors or "
                               f"model.safetensors.index.json next to config.json)")
    shown: dict = {}
    w = hf_to_canonical(cfg, tensors, files[-1] if len(files) == 2 else directory, fp16=fp16, source_names=shown)
    return Checkpoint(cfg, w, "hf", directory, files, source_names=shown)


# ------------------------------------------------------------------------------------ llama2.c .bin
def _llama2c_sizes(cfg: LlamaConfig) -> list[tuple[str, tuple]]:
    d, f, L, kv, V = cfg.d_model, cfg.d_ff, cfg.n_layers, cfg.kv_dim, cfg.vocab_size
    return [("tok_emb", (V, d)), ("rms_att", (L, d)), ("wq", (L, d, d)), ("wk", (L, kv, d)), ("wv", (L, kv, d)),
            ("wo", (L, d, d)), ("rms_ffn", (L, d)), ("w1", (L, f, d)), ("w2", (L, d, f)), ("w3", (L, f, d)),
            ("rms_final", (d,))]


def _llama2c_config(path: str, dims, shared: bool) -> LlamaConfig:
    dim, hidden, n_layers, n_heads, n_kv, vocab, seq_len = dims
    try:
        return LlamaConfig(vocab_size=vocab, n_ctx=seq_len, d_model=dim, n_layers=n_layers, n_heads=n_heads,
                           n_kv_heads=n_kv, d_ff=hidden, norm_eps=1e-5, rope_theta=10000.0,
                           tie_embeddings=shared, bos_id=1, eos_id=2)
    except ModelFormatError as e:
        raise ModelFormatError(f"{path}: not a llama2.c checkpoint: header (dim, hidden_dim, n_layers, n_heads, "
                               f"n_kv_heads, vocab_size, seq_len) = {tuple(dims)} is invalid: {e}") from None


def _split_layers(w: dict, name: str, arr: np.ndarray, L: int) -> None:
    if name in ("tok_emb", "rms_final", "wcls"):
        w[name] = arr
    else:
        for i in range(L):
            w[f"layers.{i}.{name}"] = arr[i]


def read_llama2c(path: str) -> Checkpoint:
    """llama2.c ``.bin``: legacy v0 (28-byte header, negative vocab = separate classifier), v1 (fp32) and
    v2 (Q8_0) with the 256-byte ``ak42`` header, as llama2.c's ``export.py`` writes them."""
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except FileNotFoundError:
        raise ModelFormatError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ModelFormatError(f"{path}: is a directory (expected a llama2.c .bin file or a HF folder with "
                               f"config.json)") from None
    with f:
        head = f.read(256)
    if len(head) < 28:
        raise ModelFormatError(f"{path}: truncated llama2.c checkpoint ({size} bytes, the header alone needs 28)")
    (magic,) = struct.unpack_from("<I", head, 0)
    mm = np.memmap(path, dtype=np.uint8, mode="r") if size else None
    if magic == LLAMA2C_MAGIC:
        if len(head) < 256:
            raise ModelFormatError(f"{path}: truncated llama2.c v1/v2 header ({size} bytes, expected 256)")
        (version,) = struct.unpack_from("<i", head, 4)
        dims = struct.unpack_from("<7i", head, 8)
        shared = bool(head[36])
        if version not in (1, 2):
            raise ModelFormatError(f"{path}: unsupported llama2.c checkpoint version {version} (expected 0, 1 or 2)")
        cfg = _llama2c_config(path, dims, shared)
        parts = _llama2c_sizes(cfg)
        norms = [p for p in parts if p[0] in ("rms_att", "rms_ffn", "rms_final")]
        norms = sorted(norms, key=lambda p: ("rms_att", "rms_ffn", "rms_final").index(p[0]))
        mats = [p for p in parts if p[0] not in ("rms_att", "rms_ffn", "rms_final")]
        if not shared:
            mats.append(("wcls", (cfg.vocab_size, cfg.d_model)))
        w: dict = {}
        off = 256
        if version == 1:
            order = norms + mats
            need = 256 + 4 * sum(int(np.prod(s)) for _, s in order)
            if size != need:
                raise ModelFormatError(f"{path}: llama2.c v1 file has {size} bytes, expected {need} for header "
                                       f"{tuple(dims)} (shared classifier: {shared})" +
                                       (" - truncated" if size < need else ""))
            for name, shape in order:
                n = int(np.prod(shape))
                _split_layers(w, name, np.frombuffer(mm, "<f4", n, off).reshape(shape), cfg.n_layers)
                off += 4 * n
            return Checkpoint(cfg, w, "llama2c-v1", path, [path])
        (gs,) = struct.unpack_from("<i", head, 37)
        if gs < 1 or cfg.d_model % gs:
            raise ModelFormatError(f"{path}: llama2.c v2 group size {gs} must be positive and divide dim "
                                   f"{cfg.d_model}")
        need = 256 + 4 * sum(int(np.prod(s)) for _, s in norms)
        for name, shape in mats:
            per = [shape] if name in ("tok_emb", "wcls") else [shape[1:]] * shape[0]
            for s in per:
                n = int(np.prod(s))
                if n % gs:
                    raise ModelFormatError(f"{path}: tensor {name} of {n} values is not a multiple of group size {gs}")
                need += n + 4 * (n // gs)
        if size != need:
            raise ModelFormatError(f"{path}: llama2.c v2 file has {size} bytes, expected {need} for header "
                                   f"{tuple(dims)} (shared classifier: {shared}, group size {gs})" +
                                   (" - truncated" if size < need else ""))
        for name, shape in norms:
            n = int(np.prod(shape))
            _split_layers(w, name, np.frombuffer(mm, "<f4", n, off).reshape(shape), cfg.n_layers)
            off += 4 * n
        for name, shape in mats:
            per = [(name, shape)] if name in ("tok_emb", "wcls") else \
                [(f"layers.{i}.{name}", shape[1:]) for i in range(shape[0])]
            for key, s in per:
                n = int(np.prod(s))
                q = np.frombuffer(mm, np.int8, n, off).astype(np.float32)
                off += n
                sc = np.frombuffer(mm, "<f4", n // gs, off)
                off += 4 * (n // gs)
                w[key] = (q.reshape(-1, gs) * sc[:, None]).reshape(s)
        return Checkpoint(cfg, w, "llama2c-v2", path, [path])
    # v0 / legacy
    dims = list(struct.unpack_from("<7i", head, 0))
    shared = dims[5] > 0
    dims[5] = abs(dims[5])
    cfg = _llama2c_config(path, dims, shared)
    parts = _llama2c_sizes(cfg)
    hd = cfg.head_dim
    body = sum(int(np.prod(s)) for _, s in parts) + cfg.n_ctx * hd   # + freq_cis_real/imag [seq, hd/2] each
    if not shared:
        body += cfg.vocab_size * cfg.d_model
    need = 28 + 4 * body
    if size != need:
        raise ModelFormatError(f"{path}: llama2.c checkpoint has {size} bytes, expected {need} for header "
                               f"(dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len) = "
                               f"{tuple(struct.unpack_from('<7i', head, 0))}" +
                               (" - truncated" if size < need else " - not a llama2.c v0 file or corrupt"))
    w = {}
    off = 28
    for name, shape in parts:
        n = int(np.prod(shape))
        _split_layers(w, name, np.frombuffer(mm, "<f4", n, off).reshape(shape), cfg.n_layers)
        off += 4 * n
    off += 4 * cfg.n_ctx * hd
    if not shared:
        w["wcls"] = np.frombuffer(mm, "<f4", cfg.vocab_size * cfg.d_model, off).reshape(cfg.vocab_size, cfg.d_model)
    return Checkpoint(cfg, w, "llama2c-v0", path, [path])


# ------------------------------------------------------------------------------------------ entry
def read_checkpoint(path: str, fp16: bool = False) -> Checkpoint:
    """Reads a checkpoint (HF folder, its config.json or model.safetensors, or a llama2.c ``.bin``) into
    canonical weights (arrays as stored, float32 values; no cache; ``fp16``: HF tensors converted to fp16
    one at a time, see :func:`hf_to_canonical`). Raises ModelFormatError."""
    path = os.fspath(path)
    if os.path.isdir(path):
        ck = _read_hf(path, fp16)
    elif os.path.basename(path) in ("config.json", "model.safetensors", "model.safetensors.index.json"):
        ck = _read_hf(os.path.dirname(os.path.abspath(path)), fp16)
    elif not os.path.exists(path):
        raise ModelFormatError(f"{path}: no such file or folder")
    elif path.endswith((".safetensors", ".json")):
        raise ModelFormatError(f"{path}: a Hugging Face checkpoint is loaded from its folder (config.json + "
                               f"model.safetensors)")
    else:
        ck = read_llama2c(path)
    for k, a in ck.weights.items():
        if not np.isfinite(a).all():
            raise ModelFormatError(f"{ck.path}: tensor {ck.source_names.get(k, k)!r} contains NaN or inf")
    return ck


def cache_dir(cache_dir: str | None = None) -> str:
    """The weight cache folder: the argument, else $ORION_CACHE_DIR, else ~/.cache/orion."""
    return os.path.abspath(os.path.expanduser(cache_dir or os.environ.get("ORION_CACHE_DIR") or "~/.cache/orion"))


DEFAULT_CACHE_GB = 32.0


def cache_limit_bytes() -> int:
    """The weight cache's size cap: $ORION_CACHE_MAX_GB (default 32 GB)."""
    raw = os.environ.get("ORION_CACHE_MAX_GB")
    try:
        gb = DEFAULT_CACHE_GB if raw is None else float(raw)
    except ValueError:
        gb = float("nan")
    if not gb >= 0:
        raise ModelFormatError(f"ORION_CACHE_MAX_GB={raw!r}: expected a size in GB >= 0")
    return int(gb * 2 ** 30)


def mark_used(entry: str) -> None:
    """Records a cache entry's use in its access time, which orders :func:`prune_cache`'s LRU removals."""
    with contextlib.suppress(OSError):
        os.utime(entry, (time.time(), os.stat(entry).st_mtime))


def prune_cache(root: str, keep: str | None = None) -> list[str]:
    """Removes temp files of killed writes, then the least recently used entries until the weight cache
    fits :func:`cache_limit_bytes` (``keep``: an entry never removed, the one just written). Returns the
    removed entries."""
    prune_stale_temps(root)
    prune_stale_temps(os.path.join(root, "stat"))
    try:
        entries = [e for e in os.scandir(root) if e.name.endswith(".safetensors") and e.is_file(follow_symlinks=False)]
    except OSError:
        return []
    stats = sorted(((max(e.stat().st_atime, e.stat().st_mtime), e.stat().st_size, e.path) for e in entries))
    total, limit, removed = sum(sz for _, sz, _ in stats), cache_limit_bytes(), []
    for _, size, p in stats:
        if total <= limit:
            break
        if keep and os.path.abspath(p) == os.path.abspath(keep):
            continue
        try:
            os.unlink(p)
        except OSError:
            continue
        total -= size
        removed.append(p)
        log.info("orion: weight cache over %.1f GB: removed %s", limit / 2 ** 30, p)
    return removed


def _source_files(path: str) -> list[str]:
    if os.path.isdir(path):
        d = path
    elif os.path.basename(path) in ("config.json", "model.safetensors", "model.safetensors.index.json"):
        d = os.path.dirname(os.path.abspath(path))
    else:
        return [path]
    out = [os.path.join(d, "config.json")]
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(os.path.join(d, "model.safetensors")):
        out.append(os.path.join(d, "model.safetensors"))
    elif os.path.exists(idx):
        out.append(idx)
        try:
            out += sorted({os.path.join(d, os.path.basename(v))
                           for v in read_json(idx, ModelFormatError)["weight_map"].values()})
        except Exception:  # noqa: BLE001 - read_checkpoint reports it properly
            return []
    return [p for p in out if os.path.isfile(p)]


def _content_key(files: list[str], root: str) -> str:
    """sha256 over the converter version and every source file's bytes; memoised per (path, size, mtime)."""
    st = [(os.path.abspath(p), os.stat(p)) for p in files]
    stat_id = hashlib.sha256(repr([(p, s.st_size, s.st_mtime_ns, s.st_ino) for p, s in st]).encode()).hexdigest()
    memo = os.path.join(root, "stat", stat_id[:40])
    try:
        with open(memo, encoding="ascii") as f:
            key = f.read().strip()
        if re.fullmatch(r"[0-9a-f]{64}", key):
            return key
    except OSError:
        pass
    h = hashlib.sha256(CONVERTER_VERSION.encode())
    for p, _ in st:
        if len(st) > 1:                           # folder checkpoints: the file roles matter, not a .bin's name
            h.update(os.path.basename(p).encode() + b"\0")
        with open(p, "rb") as f:
            while True:
                b = f.read(1 << 22)
                if not b:
                    break
                h.update(b)
    key = h.hexdigest()
    try:
        write_bytes_atomic(memo, key.encode())
    except OSError:
        pass
    return key


def load_weights(path: str, *, cache: str | None = None, use_cache: bool = True) -> Checkpoint:
    """Canonical fp16 weights of a checkpoint, converted once and cached on disk under
    ``<cache>/weights/<sha256 of the source files>.safetensors`` (atomic writes; a corrupt cache entry is
    rebuilt; the cache is kept under $ORION_CACHE_MAX_GB by :func:`prune_cache`). ``cache``: folder (default
    :func:`cache_dir`); ``use_cache=False`` neither reads nor writes it."""
    path = os.fspath(path)
    use_cache = use_cache and cache_limit_bytes() > 0          # ORION_CACHE_MAX_GB=0: no cache at all
    root = os.path.join(cache_dir(cache), "weights")
    files = _source_files(path) if use_cache and os.path.exists(path) else []
    entry = None
    if files:
        try:
            key = _content_key(files, root)
            entry = os.path.join(root, key + ".safetensors")
        except OSError as e:
            log.warning("orion: weight cache unavailable (%s)", e)
    if entry and os.path.exists(entry):
        try:
            st = SafetensorsFile(entry)
            cfg = config_from_dict(parse_json(st.metadata["orion_config"], entry, ModelFormatError))
            kind = st.metadata.get("orion_kind", "cached")
            w = {n: st.get(n) for n in st.names}
            check_weights(cfg, w, entry)
            mark_used(entry)
            return Checkpoint(cfg, w, kind, path, files, cache_file=entry)
        except (ModelFormatError, KeyError, ValueError, TypeError) as e:
            log.warning("orion: rebuilding corrupt weight cache entry %s (%s)", entry, e)
    ck = read_checkpoint(path, fp16=True)
    w16 = {}
    for k in list(ck.weights):                      # llama2.c views / v2 dequantised arrays: one at a time
        w16[k] = to_fp16(ck.weights.pop(k), ck.source_names.get(k, k), path)
    ck.weights = w16
    if entry:
        try:
            write_safetensors(entry, w16, {"orion_config": json.dumps(ck.config.to_dict()), "orion_kind": ck.kind,
                                           "orion_source": os.path.abspath(path), "orion_format": CONVERTER_VERSION})
            ck.cache_file = entry
            prune_cache(root, keep=entry)
        except OSError as e:
            log.warning("orion: could not write the weight cache %s (%s)", entry, e)
    return ck
