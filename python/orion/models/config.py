"""Model configurations of the two graph families (GPT-2, and Llama with its descendants), from Hugging
Face ``config.json`` files (through :mod:`orion.models.families`) and from saved ``cfg.to_dict()`` dicts.

The dataclasses live in :mod:`orion.models.config_types` (the family readers build them) and are re-exported
here; every constructor validates what the graph builders rely on and raises :class:`orion.ModelFormatError`
naming the file, the key and the expectation.
"""

from __future__ import annotations

import dataclasses
import os

from ..errors import ModelFormatError
from ..fileio import read_json
from .config_types import GPT2Config, LlamaConfig, ModelConfig
from .families import config_from_hf as _from_hf

__all__ = ["GPT2Config", "LlamaConfig", "ModelConfig", "config_from_hf", "config_from_dict", "check_config_dict",
           "read_hf_config"]


_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string", "dict": "an object",
          "list": "a list"}


def _is_kind(value, kind: str) -> bool:
    if kind in ("int", "float") and isinstance(value, bool):
        return False
    return isinstance(value, {"int": int, "float": (int, float), "bool": bool, "str": str, "dict": dict,
                              "list": list}[kind])


def check_config_dict(d: dict, where: str = "config", prefix: str = "") -> type:
    """The config class of ``d`` (a ``cfg.to_dict()``, e.g. a checkpoint's state.json ``model``), after
    checking that its family is known and that every key is a field of that class holding a value of the
    field's type; raises :class:`ModelFormatError` naming ``where`` and the key (``prefix``: the key's
    path inside the file, e.g. ``"model."``), never a TypeError from the constructor."""
    fam = d.get("family")
    cls = {"gpt2": GPT2Config, "llama": LlamaConfig}.get(fam)
    if cls is None:
        raise ModelFormatError(f"{where}: key {prefix + 'family'!r} must be 'llama' or 'gpt2', got {fam!r}")
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for k, v in d.items():
        if k == "family":
            continue
        if k not in fields:
            raise ModelFormatError(f"{where}: key {prefix + str(k)!r} is not a {cls.__name__} setting this orion "
                                   f"knows (written by another orion version, or edited?); known keys: "
                                   f"{', '.join(sorted(fields))}")
        kinds = [t.strip() for t in str(fields[k].type).split("|")]     # annotations are strings here
        if v is None and "None" in kinds:
            continue
        kinds = [t for t in kinds if t in _KINDS]
        if kinds and not any(_is_kind(v, t) for t in kinds):
            raise ModelFormatError(f"{where}: key {prefix + k!r} must be {' or '.join(_KINDS[t] for t in kinds)}"
                                   f"{' or null' if 'None' in str(fields[k].type) else ''}, got {v!r:.80}")
    return cls


def config_from_dict(d: dict, where: str = "cached config") -> ModelConfig:
    """Inverse of ``cfg.to_dict()`` (the weight cache, checkpoints' state.json); keys and value types are
    checked first (:func:`check_config_dict`)."""
    if not isinstance(d, dict):
        raise ModelFormatError(f"{where}: a model config must be an object, got {type(d).__name__}")
    cls = check_config_dict(d, where)
    return cls(**{k: v for k, v in d.items() if k != "family"})


def read_hf_config(path: str) -> dict:
    d = read_json(path, ModelFormatError,
                  "no such file (a Hugging Face checkpoint needs config.json next to model.safetensors)")
    if not isinstance(d, dict):
        raise ModelFormatError(f"{path}: expected a JSON object, got {type(d).__name__}")
    return d


def config_from_hf(d: dict, source: str = "config.json") -> ModelConfig:
    """A :class:`GPT2Config` or :class:`LlamaConfig` from a Hugging Face ``config.json`` dict: the family
    modules (:mod:`orion.models.families`) read it, refusing keys that change the math and that orion
    does not implement."""
    return _from_hf(d, source)


def hf_source(directory: str) -> str:
    return os.path.join(directory, "config.json")
