"""PEFT adapter folders: ``adapter_model.safetensors`` (Hugging Face module paths and row orders) and
``adapter_config.json``."""

from __future__ import annotations

import json
import os
import re
from typing import Mapping

import numpy as np

from ..errors import ModelFormatError
from ..fileio import parse_json, read_json
from .adapter import _DIM_KEYS, Adapter, _dims
from .config import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraConfig
from .errors import AdapterConfigError, AdapterFormatError, AdapterMismatch, AdapterShapeError
from .targets import _PATH_RE, _family_of, linear_shapes, model_config, module_parts, module_path, resolve_targets

PEFT_PREFIX = "base_model.model."
_TENSOR_RE = re.compile(r"^(?:base_model\.model\.)?(?P<mod>.+?)\.lora_(?P<ab>[AB])(?:\.[A-Za-z0-9_\-]+)?\.weight$")


def _to_hf_rows(cfg, name: str, b: np.ndarray) -> np.ndarray:
    """lora_B rows as the checkpoint orders its weight's rows (Llama-style q/k: rotate-half), by the
    loader's own conversion."""
    if cfg.family != "llama":
        return b
    from ..models.loaders import to_hf_tensor
    return to_hf_tensor(cfg, name, b)


def _from_hf_rows(cfg, name: str, b: np.ndarray) -> np.ndarray:
    if cfg.family != "llama":
        return b
    from ..models.loaders import to_canonical_tensor
    return to_canonical_tensor(cfg, name, b)


def _peft_tensors(adapter: Adapter) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """PEFT module path -> (lora_A, lora_B) in Hugging Face layout. A fused module's parts must all be
    adapted with one shared lora_A (B is stacked by rows); anything else has no exact PEFT form."""
    cfg = adapter.model_config
    out = {}
    for n in adapter.names:
        path = module_path(cfg, n)
        if path in out:
            continue
        parts = module_parts(cfg, path)
        if len(parts) == 1:
            out[path] = (adapter.A[n], _to_hf_rows(cfg, n, adapter.B[n]))
            continue
        names = [k for k, _ in parts]
        if not all(k in adapter.A for k in names):
            have = [k for k in names if k in adapter.A]
            raise AdapterConfigError(
                f"adapter {adapter.name or ''}: {', '.join(have)} without {', '.join(k for k in names if k not in have)} "
                f"cannot be saved as a PEFT file exactly: this {adapter.model_config.model_type} model fuses them "
                f"into {path!r}, which PEFT adapts as one module (one lora_A, lora_B stacked by rows)")
        if not all(np.array_equal(adapter.A[k], adapter.A[n]) for k in names):
            raise AdapterConfigError(
                f"adapter {adapter.name or ''}: {', '.join(names)} have different lora_A, so they cannot be saved as "
                f"the one PEFT adapter of the fused module {path!r} exactly (one shared lora_A); keep them tied "
                f"(init_adapter does; a trainer adds their gradients: Adapter.tie_gradients)")
        out[path] = (adapter.A[n], np.concatenate([_to_hf_rows(cfg, k, adapter.B[k]) for k in names], axis=0))
    return out


def save(adapter: Adapter, path: str | os.PathLike, dtype=np.float32, base_model: str | None = None) -> str:
    """Writes a PEFT adapter folder (``adapter_model.safetensors`` + ``adapter_config.json``), each file
    atomically; returns the folder. Tensors use Hugging Face module paths and row orders (fused modules:
    one adapter, see :func:`_peft_tensors`)."""
    from ..fileio import atomic_write
    from ..safetensors import write
    folder = os.path.abspath(os.fspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise AdapterFormatError(f"{folder}: exists and is not a folder (an adapter is saved as a PEFT folder)")
    cfg = adapter.model_config
    tensors = {}
    for mp, (a, b) in _peft_tensors(adapter).items():
        tensors[PEFT_PREFIX + mp + ".lora_A.weight"] = np.ascontiguousarray(a, dtype=dtype)
        tensors[PEFT_PREFIX + mp + ".lora_B.weight"] = np.ascontiguousarray(b, dtype=dtype)
    meta = {"format": "pt", "orion.model": json.dumps(_dims(cfg), sort_keys=True)}
    if adapter.base:
        meta["orion.base_fingerprint"] = adapter.base
    if adapter.name:
        meta["orion.name"] = adapter.name
    with atomic_write(os.path.join(folder, ADAPTER_WEIGHTS)) as f:
        write(f, tensors, meta)
    peft = adapter.config.to_peft(cfg, adapter.names, base_model)
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


def load(path: str | os.PathLike, model, weights: Mapping[str, np.ndarray] | None = None, *,
         check_base: bool = True, name: str | None = None) -> Adapter:
    """Reads a PEFT adapter (a folder with ``adapter_config.json`` + ``adapter_model.safetensors``, or the
    ``.safetensors`` file inside one) for ``model`` (a Model, or a model configuration; a Model also
    supplies the base weights for the fingerprint check). Raises :class:`AdapterFormatError` (missing or
    corrupt files, unsupported PEFT features), :class:`AdapterMismatch` (another family, dimensions or
    base), :class:`AdapterShapeError` (rank/shape mismatch), :class:`AdapterConfigError`."""
    from ..safetensors import SafetensorsFile
    cfg = model_config(model)
    if weights is None and getattr(model, "weights", None) is not None and getattr(model, "config", None) is not None:
        weights = model.weights
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
    ad = Adapter(lcfg, cfg, A, B, name=name or meta.get("orion.name") or os.path.basename(folder),
                 base=meta.get("orion.base_fingerprint"), source=tfile)
    if check_base:
        ad.check_model(cfg, weights)
    return ad
