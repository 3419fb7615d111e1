"""The LoRA hyper-parameters (:class:`LoraConfig`): rank, alpha, targets, layers; the CLI spec and PEFT's
``adapter_config.json``."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from .errors import AdapterConfigError, AdapterFormatError
from .targets import _family_of, _is_names, _peft_target_modules, model_config

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# adapter_config.json keys of PEFT features that change the math (refused when set)
_PEFT_UNSUPPORTED = {"use_dora": "DoRA", "lora_bias": "LoRA biases", "use_qalora": "QALoRA",
                     "layer_replication": "layer replication", "target_parameters": "LoRA on parameters",
                     "trainable_token_indices": "trainable token embeddings",
                     "alora_invocation_tokens": "activated LoRA", "use_bdlora": "block-diagonal LoRA"}
# initialisations that change the base weights (the adapter is trained against the residual)
_RESIDUAL_INITS = ("pissa", "olora", "loftq", "corda")


@dataclass(frozen=True)
class LoraConfig:
    """Rank ``r``, ``alpha`` (scale alpha / r, or alpha / sqrt(r) with ``rslora``), target modules, layers.

    ``dropout`` is recorded for PEFT; orion trains without adapter dropout. ``rank_pattern`` /
    ``alpha_pattern`` (PEFT's per-module overrides, keys matched against module paths) come from files."""
    r: int = 8
    alpha: float = 16.0
    targets: tuple = ("q", "v")
    layers: tuple | None = None
    dropout: float = 0.0
    rslora: bool = False
    base_model: str | None = None
    rank_pattern: dict = field(default_factory=dict)
    alpha_pattern: dict = field(default_factory=dict)

    def __post_init__(self):
        if isinstance(self.targets, str):
            object.__setattr__(self, "targets", (self.targets,) if not _is_names(self.targets)
                               else tuple(t for t in re.split(r"[,\s]+", self.targets) if t))
        else:
            object.__setattr__(self, "targets", tuple(str(t) for t in self.targets))
        if self.layers is not None:
            object.__setattr__(self, "layers", tuple(int(i) for i in self.layers))
        if not _is_rank(self.r):
            raise AdapterConfigError(f"LoRA rank r must be a positive integer, got {self.r!r:.60}")
        if not _is_alpha(self.alpha):
            raise AdapterConfigError(f"lora_alpha must be a positive finite number, got {self.alpha!r:.60}")
        _check_pattern(self.rank_pattern, "rank_pattern", _is_rank, "a positive integer rank")
        _check_pattern(self.alpha_pattern, "alpha_pattern", _is_alpha, "a positive finite number")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise AdapterConfigError(f"lora_dropout must be in [0, 1), got {self.dropout!r}")
        if not self.targets:
            raise AdapterConfigError("no target modules given")

    def check_trainable(self) -> None:
        """Refuses what orion's LoRA training would silently not do: adapter dropout (the adapters run inside
        the device programs, which take no per-step random masks; PEFT's default is 0)."""
        if float(self.dropout) != 0.0:
            raise AdapterConfigError(f"LoRA dropout={self.dropout:g}: orion's LoRA training applies no adapter "
                                     f"dropout; omit dropout (or set it to 0) to train")

    def scale_for(self, r: int, path: str | None = None) -> float:
        alpha = float(_pattern(self.alpha_pattern, path, self.alpha))
        return alpha / math.sqrt(r) if self.rslora else alpha / r

    @property
    def scale(self) -> float:
        return self.scale_for(self.r)

    def rank_for(self, path: str | None) -> int:
        return int(_pattern(self.rank_pattern, path, self.r))

    def to_dict(self) -> dict:
        return {"r": int(self.r), "alpha": float(self.alpha), "targets": list(self.targets),
                "layers": None if self.layers is None else list(self.layers), "dropout": float(self.dropout),
                "rslora": bool(self.rslora), "base_model": self.base_model, "rank_pattern": dict(self.rank_pattern),
                "alpha_pattern": dict(self.alpha_pattern)}

    @classmethod
    def from_dict(cls, d: Mapping) -> "LoraConfig":
        keys = {"r", "alpha", "targets", "layers", "dropout", "rslora", "base_model", "rank_pattern", "alpha_pattern"}
        return cls(**{k: (tuple(v) if k in ("targets", "layers") and isinstance(v, list) else v)
                      for k, v in d.items() if k in keys})

    @classmethod
    def parse(cls, spec: str) -> "LoraConfig":
        """``"r=8,alpha=16,targets=q,v[,layers=0,1][,dropout=0.05][,rslora=1]"`` (the CLI's ``--lora``):
        comma-separated ``key=value``; a bare item continues the previous key's list."""
        if not isinstance(spec, str) or not spec.strip():
            raise AdapterConfigError("empty LoRA spec; expected e.g. r=8,alpha=16,targets=q,v")
        vals: dict[str, list[str]] = {}
        key = None
        for item in (p.strip() for p in spec.split(",")):
            if not item:
                continue
            if "=" in item:
                key, _, v = item.partition("=")
                key = key.strip().lower().replace("-", "_")
                key = {"rank": "r", "lora_alpha": "alpha", "target_modules": "targets", "target": "targets",
                       "lora_dropout": "dropout", "use_rslora": "rslora", "layers_to_transform": "layers"}.get(key, key)
                vals.setdefault(key, []).append(v.strip())
            elif key in ("targets", "layers"):
                vals[key].append(item)
            else:
                raise AdapterConfigError(f"LoRA spec {spec!r}: {item!r} is not key=value (keys: r, alpha, targets, "
                                         f"layers, dropout, rslora)")
        unknown = set(vals) - {"r", "alpha", "targets", "layers", "dropout", "rslora"}
        if unknown:
            raise AdapterConfigError(f"LoRA spec {spec!r}: unknown key(s) {sorted(unknown)} (keys: r, alpha, targets, "
                                     f"layers, dropout, rslora)")
        kw: dict = {}
        try:
            if "r" in vals:
                kw["r"] = int(vals["r"][-1])
            if "alpha" in vals:
                kw["alpha"] = float(vals["alpha"][-1])
            if "dropout" in vals:
                kw["dropout"] = float(vals["dropout"][-1])
            if "layers" in vals:
                kw["layers"] = tuple(int(x) for x in vals["layers"] if x)
            if "rslora" in vals:
                kw["rslora"] = vals["rslora"][-1].lower() in ("1", "true", "yes", "on")
        except ValueError as e:
            raise AdapterConfigError(f"LoRA spec {spec!r}: {e}") from None
        if "targets" in vals:
            kw["targets"] = tuple(t for t in vals["targets"] if t)
        if "alpha" not in kw:
            kw["alpha"] = float(2 * kw.get("r", cls.r))
        return cls(**kw)

    def to_peft(self, cfg, names: Iterable[str], base_model: str | None = None) -> dict:
        """PEFT's ``adapter_config.json`` for an adapter on ``names``."""
        fam = _family_of(model_config(cfg))
        return {
            "alpha_pattern": dict(self.alpha_pattern), "auto_mapping": None,
            "base_model_name_or_path": base_model or self.base_model, "bias": "none",
            "fan_in_fan_out": fam == "gpt2", "inference_mode": True, "init_lora_weights": True,
            "layers_pattern": None, "layers_to_transform": None if self.layers is None else list(self.layers),
            "lora_alpha": self.alpha, "lora_dropout": float(self.dropout), "modules_to_save": None,
            "peft_type": "LORA", "r": int(self.r), "rank_pattern": dict(self.rank_pattern), "revision": None,
            "target_modules": _peft_target_modules(cfg, names), "task_type": "CAUSAL_LM",
            "use_dora": False, "use_rslora": bool(self.rslora),
        }

    @classmethod
    def from_peft(cls, d: Mapping, source: str = ADAPTER_CONFIG) -> "LoraConfig":
        if not isinstance(d, Mapping):
            raise AdapterFormatError(f"{source}: expected a JSON object")
        if d.get("peft_type", "LORA") not in ("LORA", None):
            raise AdapterFormatError(f"{source}: peft_type {d.get('peft_type')!r} is not LORA")
        for k, what in _PEFT_UNSUPPORTED.items():
            if d.get(k) not in (None, False, [], {}):
                raise AdapterFormatError(f"{source}: {k}={d[k]!r} ({what}) is not supported (plain LoRA only)")
        init = d.get("init_lora_weights")
        if isinstance(init, str) and init.startswith(_RESIDUAL_INITS):
            raise AdapterFormatError(f"{source}: init_lora_weights={init!r}: such an adapter applies to the residual "
                                     f"base weights its initialisation left, not to the original model; convert it to "
                                     f"a plain LoRA first (PEFT: save_pretrained(..., "
                                     f"path_initial_model_for_weight_conversion=...))")
        if d.get("bias", "none") not in ("none", None):
            raise AdapterFormatError(f"{source}: bias={d.get('bias')!r} is not supported (adapters without biases)")
        if d.get("modules_to_save"):
            raise AdapterFormatError(f"{source}: modules_to_save {d['modules_to_save']!r} is not supported (only "
                                     f"lora_A/lora_B tensors)")
        if d.get("layers_pattern") not in (None, [], ""):
            raise AdapterFormatError(f"{source}: layers_pattern is not supported")
        if "r" not in d:
            raise AdapterFormatError(f"{source}: missing key 'r'")
        layers = d.get("layers_to_transform")
        if isinstance(layers, int) and not isinstance(layers, bool):
            layers = [layers]
        tm = d.get("target_modules") or []
        _check_peft_types(d, source, layers, tm)
        try:
            return cls(r=d["r"], alpha=d.get("lora_alpha", 8), targets=tm if isinstance(tm, str) else tuple(tm),
                       layers=None if layers is None else tuple(layers), dropout=float(d.get("lora_dropout") or 0.0),
                       rslora=bool(d.get("use_rslora", False)), base_model=d.get("base_model_name_or_path"),
                       rank_pattern=dict(d.get("rank_pattern") or {}), alpha_pattern=dict(d.get("alpha_pattern") or {}))
        except AdapterConfigError as e:
            raise AdapterConfigError(f"{source}: {e}") from None


def _check_peft_types(d: Mapping, source: str, layers, targets) -> None:
    """The PEFT keys read here, of the types PEFT writes (else int()/float()/dict() would fail bare or guess)."""
    def bad(key, want):
        raise AdapterConfigError(f"{source}: {key} must be {want}, got {d.get(key)!r}")
    if not isinstance(targets, str) and not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
        bad("target_modules", "a module name, a regex string or a list of module names")
    if layers is not None and not (isinstance(layers, list) and
                                   all(isinstance(i, int) and not isinstance(i, bool) for i in layers)):
        bad("layers_to_transform", "a layer index or a list of layer indices")
    p = d.get("lora_dropout")
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1):
        bad("lora_dropout", "a number in [0, 1)")
    for key in ("rank_pattern", "alpha_pattern"):
        if d.get(key) is not None and not isinstance(d.get(key), Mapping):
            bad(key, "an object module pattern -> value")
    if not isinstance(d.get("use_rslora", False), bool):
        bad("use_rslora", "true or false")
    if not isinstance(d.get("base_model_name_or_path"), (str, type(None))):
        bad("base_model_name_or_path", "a model name or path")


def _is_rank(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 1


def _is_alpha(v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.number)):
        return False
    try:
        return math.isfinite(v) and v > 0
    except OverflowError:                   # an integer beyond float range
        return False


def _check_pattern(table, key: str, valid, want: str) -> None:
    """PEFT's per-module overrides: module pattern (a regex matched against module paths) -> value; each
    entry is checked here, once, instead of failing bare (or silently) when a module is looked up."""
    if not isinstance(table, Mapping):
        raise AdapterConfigError(f"{key} must be an object module pattern -> value, got {type(table).__name__}")
    for k, v in table.items():
        if not isinstance(k, str) or not k:
            raise AdapterConfigError(f"{key}: pattern {k!r} must be a non-empty module name or regex")
        try:
            re.compile(k)
        except re.error as e:
            raise AdapterConfigError(f"{key}: pattern {k!r} is not a valid regex ({e})") from None
        if not valid(v):
            raise AdapterConfigError(f"{key}[{k!r}] must be {want}, got {v!r:.60}")


def _pattern(table: Mapping, path: str | None, default):
    if path and table:
        for k, v in table.items():
            if path == k or re.fullmatch(rf"(.*\.)?{k}", path):
                return v
    return default
