"""The schema of a checkpoint's ``state.json`` and of its file manifest, checked on every read (``--resume``,
``--init``): a wrong type or a missing key is a :class:`CheckpointError` naming the key, never a KeyError
or TypeError deep inside the trainer; file names are plain names inside the checkpoint folder
(:func:`orion.run_folder.confined`, on read).
"""

from __future__ import annotations

import dataclasses

from ..errors import ModelFormatError
from ..models.config import check_config_dict
from .errors import CheckpointError
from .train_config import TrainConfig

_INT = "an integer"
_NUM = "a number"
_STR = "a string"


def _is(value, kind: str) -> bool:
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUM:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == _STR:
        return isinstance(value, str)
    if kind == "an object":
        return isinstance(value, dict)
    if kind == "a list":
        return isinstance(value, list)
    if kind == "true or false":
        return isinstance(value, bool)
    raise AssertionError(kind)


# key -> (expected kind, required, may be null)
STATE = {
    "format": (_STR, True, False), "version": (_INT, True, False), "step": (_INT, True, False),
    "model": ("an object", True, False), "train": ("an object", True, False),
    "optimizer": ("an object", True, False), "scaler": ("an object", True, False), "data": ("an object", True, False),
    "stability": ("an object", False, False), "history": ("a list", False, False), "rng": ("an object", False, False),
    "tokenizer": (_STR, False, True), "residual_scale": (_NUM, False, False), "strategy": (_STR, False, True),
    "lora": ("an object", False, True), "lora_base": (_STR, False, True), "data_source": (_STR, False, True),
    "init": (_STR, False, True), "weights": (_STR, False, False), "lora_quantize": (_STR, False, True),
    "mask_prompt": ("true or false", False, False),
}
SECTIONS = {
    "optimizer": {"t": (_INT, True, False), "betas": ("a list", False, False), "eps": (_NUM, False, False)},
    "data": {"epoch": (_INT, True, False), "cursor": (_INT, True, False), "seed": (_INT, False, False),
             "fingerprint": (_STR, False, True), "n_tokens": (_INT, False, False)},
    "scaler": {"scale": (_NUM, True, False), "growth_interval": (_INT, False, False), "max_scale": (_NUM, False, False),
               "min_scale": (_NUM, False, False), "good_steps": (_INT, True, False), "overflows": (_INT, False, False)},
}
WEIGHTS_LAYOUTS = ("hf", "canonical")


def _check(d: dict, spec: dict, where: str, prefix: str) -> None:
    for key, (kind, required, nullable) in spec.items():
        name = prefix + key
        if key not in d:
            if required:
                raise CheckpointError(f"{where}: key {name!r} is missing")
            continue
        v = d[key]
        if v is None and nullable:
            continue
        if not _is(v, kind):
            raise CheckpointError(f"{where}: key {name!r} must be {kind}, got {v!r:.80}")


def validate_state(state, where: str) -> None:
    """Raises CheckpointError naming the first key of ``state`` that is missing or of the wrong type."""
    if not isinstance(state, dict):
        raise CheckpointError(f"{where}: must be a JSON object, got {type(state).__name__}")
    _check(state, STATE, where, "")
    for sec, spec in SECTIONS.items():
        _check(state[sec], spec, where, sec + ".")
    if state["step"] < 0 or state["data"]["epoch"] < 0 or state["data"]["cursor"] < 0 or state["optimizer"]["t"] < 0:
        raise CheckpointError(f"{where}: 'step', 'optimizer.t', 'data.epoch' and 'data.cursor' must be >= 0")
    if state.get("weights", "canonical") not in WEIGHTS_LAYOUTS:
        raise CheckpointError(f"{where}: key 'weights' must be one of {list(WEIGHTS_LAYOUTS)}, got "
                              f"{state['weights']!r}")
    for k, v in state.get("stability", {}).items():
        if not _is(v, _INT):
            raise CheckpointError(f"{where}: key 'stability.{k}' must be an integer, got {v!r:.80}")
    if not all(v is None or _is(v, _NUM) for v in state.get("history", [])):
        raise CheckpointError(f"{where}: key 'history' must be a list of numbers (or null for a skipped step)")
    _check_train(state["train"], where)
    _check_model(state["model"], where)


def _check_model(model: dict, where: str) -> None:
    """The ``model`` section: a ``LlamaConfig.to_dict()`` (unknown keys and wrong types named here, not as a
    constructor's TypeError); the older llama2.c-named form (no ``family``) is checked where it is read."""
    if "family" in model:
        try:
            check_config_dict(model, where, "model.")
        except ModelFormatError as e:
            raise CheckpointError(str(e)) from None


def _check_train(train: dict, where: str) -> None:
    """The ``train`` section against :class:`TrainConfig`'s field types (the settings a resume reuses)."""
    kinds = {"int": _INT, "float": _NUM, "str": _STR, "bool": "true or false"}
    for f in dataclasses.fields(TrainConfig):
        if f.name not in train or train[f.name] is None:
            continue
        kind = kinds.get(str(f.type).split("|")[0].strip())          # annotations are strings here
        if kind and not _is(train[f.name], kind):
            raise CheckpointError(f"{where}: key 'train.{f.name}' must be {kind}, got {train[f.name]!r:.80}")


def validate_manifest(files, where: str) -> None:
    if not isinstance(files, dict):
        raise CheckpointError(f"{where}: 'files' must be an object mapping file names to size and sha256")
    for fn, info in files.items():
        if not isinstance(info, dict) or not _is(info.get("size"), _INT) or not _is(info.get("sha256"), _STR):
            raise CheckpointError(f"{where}: key 'files.{fn}' must be an object with an integer 'size' and a "
                                  f"string 'sha256'")
