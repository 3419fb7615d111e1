"""PEFT adapter folders: ``adapter_model.safetensors`` (Hugging Face module paths and row orders) and
``adapter_config.json`` - the layout as functions of an adapter's parts (config, model configuration, A and B
by canonical name), below :class:`~orion.lora.Adapter`, whose ``save``/``load`` go through them."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

import numpy as np

from ..errors import ModelFormatError
from ..fileio import atomic_write, parse_json, read_json
from ..native.safetensors import SafetensorsFile, write
from .config import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraConfig
from .errors import AdapterConfigError, AdapterFormatError, AdapterMismatch, AdapterShapeError
from .targets import _PATH_RE, _family_of, linear_shapes, model_config, module_parts, module_path, resolve_targets

PEFT_PREFIX = "base_model.model."
_TENSOR_RE = re.compile(r"^(?:base_model\.model\.)?(?P<mod>.+?)\.lora_(?P<ab>[AB])(?:\.[A-Za-z0-9_\-]+)?\.weight$")
# the model dimensions an adapter file records (metadata orion.model) and an adapter is checked against
_DIM_KEYS = ("family", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "vocab_size")


def _dims(cfg) -> dict:
    cfg = model_config(cfg)
    return {k: getattr(cfg, k) for k in _DIM_KEYS}


def _to_hf_rows(cfg, name: str, b: np.ndarray) -> np.ndarray:
    """lora_B rows as the checkpoint orders its weight's rows (Llama-style q/k: rotate-half), by the
    loader's own conversion."""
    if cfg.family != "llama":
        return b
    from ..models.loaders import to_hf_tensor  # circle: orion.models (layer_params) imports orion.lora
    return to_hf_tensor(cfg, name, b)


def _from_hf_rows(cfg, name: str, b: np.ndarray) -> np.ndarray:
    if cfg.family != "llama":
        return b
    from ..models.loaders import to_canonical_tensor  # circle: orion.models (layer_params) imports orion.lora
    return to_canonical_tensor(cfg, name, b)


def _peft_tensors(cfg, adapted, A: dict, B: dict, label: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """PEFT module path -> (lora_A, lora_B) in Hugging Face layout. A fused module's parts must all be
    adapted with one shared lora_A (B is stacked by rows); anything else has no exact PEFT form."""
    out = {}
    for n in adapted:
        path = module_path(cfg, n)
        if path in out:
            continue
        parts = module_parts(cfg, path)
        if len(parts) == 1:
            out[path] = (A[n], _to_hf_rows(cfg, n, B[n]))
            continue
        names = [k for k, _ in parts]
        if not all(k in A for k in names):
            have = [k for k in names if k in A]
            raise AdapterConfigError(
                f"adapter {label}: {', '.join(have)} without {', '.join(k for k in names if k not in have)} "
                f"cannot be saved as a PEFT file exactly: this {cfg.model_type} model fuses them "
                f"into {path!r}, which PEFT adapts as one module (one lora_A, lora_B stacked by rows)")
        if not all(np.array_equal(A[k], A[n]) for k in names):
            raise AdapterConfigError(
                f"adapter {label}: {', '.join(names)} have different lora_A, so they cannot be saved as "
                f"the one PEFT adapter of the fused module {path!r} exactly (one shared lora_A); keep them tied "
                f"(init_adapter does; a trainer adds their gradients: Adapter.tie_gradients)")
        out[path] = (A[n], np.concatenate([_to_hf_rows(cfg, k, B[k]) for k in names], axis=0))
    return out


def write_peft(path: str | os.PathLike, config: LoraConfig, cfg, names, A: dict, B: dict, *, name: str | None = None,
               base: str | None = None, dtype=np.float32, base_model: str | None = None) -> str:
    """Writes a PEFT adapter folder (``adapter_model.safetensors`` + ``adapter_config.json``), each file
    atomically; returns the folder. Tensors use Hugging Face module paths and row orders (fused modules:
    one adapter, see :func:`_peft_tensors`)."""
    folder = os.path.abspath(os.fspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise AdapterFormatError(f"{folder}: exists and is not a folder (an adapter is saved as a PEFT folder)")
    tensors = {}
    for mp, (a, b) in _peft_tensors(cfg, names, A, B, name or "").items():
        tensors[PEFT_PREFIX + mp + ".lora_A.weight"] = np.ascontiguousarray(a, dtype=dtype)
        tensors[PEFT_PREFIX + mp + ".lora_B.weight"] = np.ascontiguousarray(b, dtype=dtype)
    meta = {"format": "pt", "orion.model": json.dumps(_dims(cfg), sort_keys=True)}
    if base:
        meta["orion.base_fingerprint"] = base
    if name:
        meta["orion.name"] = name
    with atomic_write(os.path.join(folder, ADAPTER_WEIGHTS)) as f:
        write(f, tensors, meta)
    peft = config.to_peft(cfg, names, base_model)
    with atomic_write(os.path.join(folder, ADAPTER_CONFIG), "w") as f:
        json.dump(peft, f, indent=2, sort_keys=True)
    return folder


def _adapter_files(path) -> tuple[str, str, str]:
    """(folder, tensor file, config file) of an adapter given as its folder or its ``.safetensors``."""
    p = os.path.abspath(os.fspath(path))
    if os.path.isdir(p):
        folder, tfile = p, os.path.join(p, ADAPTER_WEIGHTS)
        if not os.path.exists(tfile) and os.path.exists(os.path.join(p, "adapter_model.bin")):
            raise AdapterFormatError(f"{p}: adapter_model.bin (pickle) is not read; convert it to "
                                     f"adapter_model.safetensors")
    elif os.path.isfile(p):
        folder, tfile = os.path.dirname(p), p
    else:
        raise AdapterFormatError(f"{p}: no such adapter folder or file")
    return folder, tfile, os.path.join(folder, ADAPTER_CONFIG)


def read_config(path: str | os.PathLike) -> LoraConfig:
    """The :class:`LoraConfig` of a PEFT adapter (folder or its ``.safetensors``), checked without reading
    the tensors or any model: what a command validates before it loads one."""
    cpath = _adapter_files(path)[2]
    raw = read_json(cpath, AdapterFormatError, "missing (a PEFT adapter needs adapter_config.json next to the tensors)")
    return LoraConfig.from_peft(raw, cpath)


@dataclass
class PeftParts:
    """What a PEFT adapter folder holds, read and checked against a model (A and B by canonical name, orion's
    row orders); :func:`orion.lora.load` builds the Adapter."""
    config: LoraConfig
    model_config: object
    A: dict
    B: dict
    name: str
    base: str | None
    source: str


def read_peft(path: str | os.PathLike, model) -> PeftParts:
    """Reads a PEFT adapter (a folder with ``adapter_config.json`` + ``adapter_model.safetensors``, or the
    ``.safetensors`` file inside one) for ``model`` (a Model or a model configuration): every check of
    :func:`orion.lora.load` but the base weights' fingerprint."""
    cfg = model_config(model)
    folder, tfile, cpath = _adapter_files(path)
    lcfg = read_config(path)
    try:
        st = SafetensorsFile(tfile)
    except ModelFormatError as e:
        raise AdapterFormatError(str(e)) from None
    fam = _family_of(cfg)
    A, B = {}, {}
    for tname in st.names:
        m = _TENSOR_RE.match(tname)
        if not m:
            if ".lora_" in tname or tname.endswith(".bias"):
                raise AdapterFormatError(f"{tfile}: tensor {tname!r} is not supported (only lora_A/lora_B weights)")
            raise AdapterFormatError(f"{tfile}: unexpected tensor {tname!r} (not a PEFT LoRA tensor)")
        mod = m.group("mod")
        parts = module_parts(cfg, mod)
        if parts is None:
            other = [f for f in _PATH_RE if f != fam and _PATH_RE[f].match(mod)]
            what = f"a {other[0]} model" if other else "another model"
            raise AdapterMismatch(f"{tfile}: {mod!r} is not a linear of this {getattr(cfg, 'model_type', fam)} "
                                  f"model — an adapter for {what}")
        if int(parts[0][0].split(".")[1]) >= cfg.n_layers:
            raise AdapterMismatch(f"{tfile}: {mod!r}: layer out of range, the model has {cfg.n_layers} layers — an "
                                  f"adapter for another model")
        arr = np.array(st.get(tname), dtype=np.float32)
        if m.group("ab") == "A":
            A.update({k: arr.copy() for k, _ in parts})     # a fused module's parts share lora_A (copies)
        elif len(parts) == 1:
            B[parts[0][0]] = arr
        else:
            rows = [r for _, r in parts]
            if arr.ndim != 2 or arr.shape[0] != sum(rows):
                raise AdapterShapeError(f"{tfile}: {mod}: lora_B {list(arr.shape)} does not fit the fused module "
                                        f"({' + '.join(f'{k.rsplit(chr(46), 1)[-1]} {r}' for k, r in parts)} = "
                                        f"{sum(rows)} rows) — an adapter for another model?")
            B.update(zip((k for k, _ in parts), np.split(arr, np.cumsum(rows)[:-1], axis=0)))
    if not A and not B:
        raise AdapterFormatError(f"{tfile}: holds no lora_A/lora_B tensors")
    if lcfg.targets:                 # PEFT refuses target_modules that match no module of the model; so do we
        try:
            resolve_targets(cfg, lcfg.targets, lcfg.layers)
        except AdapterConfigError as e:
            raise AdapterConfigError(f"{cpath}: {e}") from None
    shapes = linear_shapes(cfg)
    for n in list(B):
        if n in A and B[n].ndim == 2 and B[n].shape[0] == shapes[n][0]:
            B[n] = _from_hf_rows(cfg, n, np.ascontiguousarray(B[n]))
    meta = st.metadata
    if "orion.model" in meta:
        try:
            dims = parse_json(meta["orion.model"], f"{tfile}: metadata orion.model", AdapterFormatError)
        except AdapterFormatError:
            dims = None                  # optional: a foreign writer's value is not ours to judge
        if isinstance(dims, dict):
            mine = _dims(cfg)
            diff = [f"{k} {dims.get(k)} vs {mine[k]}" for k in _DIM_KEYS if k in dims and dims[k] != mine[k]]
            if diff:
                raise AdapterMismatch(f"{tfile}: the adapter was made for another model: {', '.join(diff)} "
                                      f"(adapter vs model)")
    return PeftParts(lcfg, cfg, A, B, meta.get("orion.name") or os.path.basename(folder),
                     meta.get("orion.base_fingerprint"), tfile)
