"""PEFT adapter folders: ``adapter_model.safetensors`` (Hugging Face module paths and row orders) and
``adapter_config.json``."""

from __future__ import annotations

import json
import os
import re
from typing import Mapping

import numpy as np

from ..errors import ModelFormatError
from ..fileio import read_json
from .adapter import _DIM_KEYS, Adapter, _dims
from .config import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraConfig
from .errors import AdapterFormatError, AdapterMismatch
from .targets import _PATH_RE, _family_of, canonical_name, linear_shapes, model_config, module_path

PEFT_PREFIX = "base_model.model."
_TENSOR_RE = re.compile(r"^(?:base_model\.model\.)?(?P<mod>.+?)\.lora_(?P<ab>[AB])(?:\.[A-Za-z0-9_\-]+)?\.weight$")


def _to_hf_rows(cfg, name: str, b: np.ndarray) -> np.ndarray:
    from ..models.loaders import permute_adjacent_to_rotate_half
    key = name.rsplit(".", 1)[-1]
    if cfg.family == "llama" and key in ("wq", "wk"):
        return permute_adjacent_to_rotate_half(b, cfg.n_heads if key == "wq" else cfg.n_kv_heads)
    return b


def _from_hf_rows(cfg, name: str, b: np.ndarray) -> np.ndarray:
    from ..models.loaders import permute_rotate_half_to_adjacent
    key = name.rsplit(".", 1)[-1]
    if cfg.family == "llama" and key in ("wq", "wk"):
        return permute_rotate_half_to_adjacent(b, cfg.n_heads if key == "wq" else cfg.n_kv_heads)
    return b


def save(adapter: Adapter, path: str | os.PathLike, dtype=np.float32, base_model: str | None = None) -> str:
    """Writes a PEFT adapter folder (``adapter_model.safetensors`` + ``adapter_config.json``), each file
    atomically; returns the folder. Tensors use Hugging Face module paths and row orders."""
    from ..fileio import atomic_write
    from ..safetensors import write
    folder = os.path.abspath(os.fspath(path))
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise AdapterFormatError(f"{folder}: exists and is not a folder (an adapter is saved as a PEFT folder)")
    cfg = adapter.model_config
    tensors = {}
    for n in adapter.A:
        mp = PEFT_PREFIX + module_path(cfg, n)
        tensors[mp + ".lora_A.weight"] = np.ascontiguousarray(adapter.A[n], dtype=dtype)
        tensors[mp + ".lora_B.weight"] = np.ascontiguousarray(_to_hf_rows(cfg, n, adapter.B[n]), dtype=dtype)
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
    cpath = os.path.join(folder, ADAPTER_CONFIG)
    raw_cfg = read_json(cpath, AdapterFormatError,
                        "missing (a PEFT adapter needs adapter_config.json next to the tensors)")
    lcfg = LoraConfig.from_peft(raw_cfg, cpath)
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
        canon = canonical_name(cfg, mod)
        if canon is None:
            other = [f for f in _PATH_RE if f != fam and _PATH_RE[f].match(mod)]
            what = f"a {other[0]} model" if other else "another model"
            raise AdapterMismatch(f"{tfile}: {mod!r} is not a linear of this {fam} model — an adapter for {what}")
        if int(canon.split(".")[1]) >= cfg.n_layers:
            raise AdapterMismatch(f"{tfile}: {mod!r}: layer out of range, the model has {cfg.n_layers} layers — an "
                                  f"adapter for another model")
        arr = np.array(st.get(tname), dtype=np.float32)
        (A if m.group("ab") == "A" else B)[canon] = arr
    for n in list(B):
        if n in A and B[n].ndim == 2 and B[n].shape[0] == linear_shapes(cfg)[n][0]:
            B[n] = _from_hf_rows(cfg, n, B[n])
    meta = st.metadata
    if "orion.model" in meta:
        try:
            dims = json.loads(meta["orion.model"])
        except ValueError:
            dims = None
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
