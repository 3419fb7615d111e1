"""LoRA adapters as program inputs: hot swap without compiles, merge/unmerge, PEFT-compatible files.

A linear with an adapter computes ``W x + (alpha / r) · B (A x)``: W stays baked in the program (a 1x1
conv), A ``[r, in]`` and B ``[out, r]`` are program inputs (:func:`orion.ops.lora_linear`; the compiler's
dynamic-weights pass makes them inputs, io_legalize pads them to the minimum surface size and the
runtime binds every input by name, so the alphabetical slot order of C13 and the uniform allocation
of C12 never reach this code). The scale ``alpha / r`` is folded into the staged B, so adapters with
any alpha and any rank up to the programs' slot rank (zero-padded; exact) swap by writing surfaces:
zero compiles, zero loads.

Names. An :class:`Adapter` is bound to one model configuration and holds its tensors by the canonical
weight name of the linear it adapts (``layers.3.wq``, ``h.0.wqkv``: :mod:`orion.models.loaders`), in
orion's layouts (Llama q/k rows in llama2.c's adjacent-pair order). Files are PEFT's: a folder with
``adapter_model.safetensors`` (``base_model.model.<module path>.lora_A.weight`` ``[r, in]`` and
``.lora_B.weight`` ``[out, r]``, Hugging Face module paths and row orders) and ``adapter_config.json``
(``r``, ``lora_alpha``, ``target_modules``, ...).

Target modules (``targets``), per family — short names, the Hugging Face module names, PEFT's suffix
rule (``"c_proj"`` matches both GPT-2 ``attn.c_proj`` and ``mlp.c_proj``), ``"all-linear"``, or a regex
string matched against the full module path as PEFT does:

=========  =============================================================================
Llama      q/q_proj, k/k_proj, v/v_proj, o/o_proj, w1/gate/gate_proj, w3/up/up_proj, w2/down/down_proj
GPT-2      c_attn (qkv), attn.c_proj (o), c_fc (fc), mlp.c_proj (proj), c_proj (both projections)
=========  =============================================================================

>>> m = orion.models.load("stories15M.bin")
>>> a = orion.lora.load("adapters/tiny-shakespeare", m)       # PEFT folder
>>> m.set_adapter(a); m.generate("Once upon a time")           # 0 compiles after the first use
>>> m.set_adapter(None)                                        # the base model again (exactly)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from .errors import InputError, ModelFormatError, OrionError
from .fileio import read_json

log = logging.getLogger("orion")

__all__ = ["LoraError", "AdapterConfigError", "AdapterMismatch", "AdapterShapeError", "AdapterFormatError",
           "LoraConfig", "Adapter", "init_adapter", "load", "save", "merge", "unmerge", "set_adapter",
           "resolve_targets", "module_path", "AdapterSlots", "graph_linear", "slot_names", "base_fingerprint",
           "ADAPTER_CONFIG", "ADAPTER_WEIGHTS"]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."


# ----------------------------------------------------------------------------------------- errors
class LoraError(OrionError):
    """Base class of the adapter errors."""


class AdapterConfigError(LoraError, InputError):
    """A bad adapter configuration: unknown target module, rank or alpha out of range, malformed spec."""


class AdapterMismatch(LoraError, ModelFormatError):
    """The adapter belongs to another model (other family, dimensions or base weights)."""


class AdapterShapeError(AdapterMismatch):
    """An adapter tensor has the wrong shape for its linear, or A and B (or the config) disagree on the rank."""


class AdapterFormatError(LoraError, ModelFormatError):
    """An adapter file or folder is missing, corrupt, or uses a PEFT feature orion does not support."""


# ----------------------------------------------------------------------------------------- modules
# canonical key -> Hugging Face module suffix (inside a layer)
_LLAMA = {"wq": "self_attn.q_proj", "wk": "self_attn.k_proj", "wv": "self_attn.v_proj", "wo": "self_attn.o_proj",
          "w1": "mlp.gate_proj", "w3": "mlp.up_proj", "w2": "mlp.down_proj"}
_GPT2 = {"wqkv": "attn.c_attn", "wo": "attn.c_proj", "wfc": "mlp.c_fc", "wproj": "mlp.c_proj"}
_ALIASES = {
    "llama": {"q": ("wq",), "k": ("wk",), "v": ("wv",), "o": ("wo",), "gate": ("w1",), "up": ("w3",),
              "down": ("w2",), "wq": ("wq",), "wk": ("wk",), "wv": ("wv",), "wo": ("wo",), "w1": ("w1",),
              "w2": ("w2",), "w3": ("w3",), "attn": ("wq", "wk", "wv", "wo"), "ffn": ("w1", "w2", "w3"),
              "mlp": ("w1", "w2", "w3")},
    "gpt2": {"qkv": ("wqkv",), "wqkv": ("wqkv",), "o": ("wo",), "wo": ("wo",), "fc": ("wfc",), "wfc": ("wfc",),
             "proj": ("wproj",), "wproj": ("wproj",), "attn": ("wqkv", "wo"), "ffn": ("wfc", "wproj"),
             "mlp": ("wfc", "wproj")},
}
_FAMILY_MODULES = {"llama": _LLAMA, "gpt2": _GPT2}
_LAYER_PATH = {"llama": "model.layers.{}.", "gpt2": "transformer.h.{}."}
_CANON_PREFIX = {"llama": "layers", "gpt2": "h"}
_PATH_RE = {"llama": re.compile(r"^model\.layers\.(\d+)\.(.+)$"), "gpt2": re.compile(r"^transformer\.h\.(\d+)\.(.+)$")}
_TENSOR_RE = re.compile(r"^(?:base_model\.model\.)?(?P<mod>.+?)\.lora_(?P<ab>[AB])(?:\.[A-Za-z0-9_\-]+)?\.weight$")


def _family_of(cfg) -> str:
    fam = getattr(cfg, "family", None)
    if fam not in _FAMILY_MODULES:
        raise AdapterConfigError(f"LoRA supports Llama and GPT-2 models, got family {fam!r}")
    return fam


def model_config(cfg):
    """``orion.models`` configuration of ``cfg`` (also accepts the trainer's ``orion.train.model.ModelConfig``
    or anything with a ``config`` attribute, e.g. a Model)."""
    if getattr(cfg, "family", None) in _FAMILY_MODULES:
        return cfg
    inner = getattr(cfg, "config", None)
    if inner is not None and getattr(inner, "family", None) in _FAMILY_MODULES:
        return inner
    if hasattr(cfg, "hidden_dim") and hasattr(cfg, "dim"):
        from .train.model import to_models_config
        return to_models_config(cfg)
    raise AdapterConfigError(f"expected a model configuration (GPT2Config, LlamaConfig, a training ModelConfig) or a "
                             f"Model, got {type(cfg).__name__}")


def linear_shapes(cfg) -> dict[str, tuple[int, int]]:
    """Canonical name -> ``(out, in)`` of every linear an adapter may target."""
    from .models.loaders import expected_shapes
    cfg = model_config(cfg)
    keys = _FAMILY_MODULES[_family_of(cfg)]
    return {n: tuple(s) for n, s in expected_shapes(cfg).items() if len(s) == 2 and n.rsplit(".", 1)[-1] in keys
            and n.count(".") == 2}


def module_path(cfg, canonical: str) -> str:
    """``layers.3.wq`` -> ``model.layers.3.self_attn.q_proj`` (the Hugging Face / PEFT module path)."""
    fam = _family_of(model_config(cfg))
    _, layer, key = canonical.split(".")
    return _LAYER_PATH[fam].format(layer) + _FAMILY_MODULES[fam][key]


def canonical_name(cfg, path: str) -> str | None:
    """The inverse of :func:`module_path` (None when ``path`` is not a linear of this family)."""
    fam = _family_of(model_config(cfg))
    m = _PATH_RE[fam].match(path)
    if not m:
        return None
    inv = {v: k for k, v in _FAMILY_MODULES[fam].items()}
    key = inv.get(m.group(2))
    return None if key is None else f"{_CANON_PREFIX[fam]}.{int(m.group(1))}.{key}"


def resolve_targets(cfg, targets, layers: Iterable[int] | None = None) -> list[str]:
    """Canonical names of the linears selected by ``targets`` (see the module docstring) in ``layers``
    (None: every layer), ordered by layer. Unknown names raise :class:`AdapterConfigError`."""
    cfg = model_config(cfg)
    fam = _family_of(cfg)
    mods = _FAMILY_MODULES[fam]
    shapes = linear_shapes(cfg)
    if layers is not None:
        layers = sorted({int(i) for i in layers})
        bad = [i for i in layers if not 0 <= i < cfg.n_layers]
        if bad:
            raise AdapterConfigError(f"layers {bad} out of range: the model has {cfg.n_layers} layers")
    keep = (lambda n: int(n.split(".")[1]) in layers) if layers is not None else (lambda n: True)
    if isinstance(targets, (list, tuple)) and len(targets) == 1 and not _is_names(targets[0]):
        targets = targets[0]                   # a PEFT regex kept in a one-element tuple by LoraConfig
    if isinstance(targets, str) and (targets == "all-linear" or not _is_names(targets)):
        if targets == "all-linear":
            return [n for n in shapes if keep(n)]
        try:
            rx = re.compile(targets)
        except re.error as e:
            raise AdapterConfigError(f"target_modules regex {targets!r} is invalid: {e}") from None
        out = [n for n in shapes if keep(n) and rx.fullmatch(module_path(cfg, n))]
        if not out:
            raise AdapterConfigError(f"target_modules regex {targets!r} matches no linear of this {fam} model")
        return out
    if isinstance(targets, str):
        targets = [t for t in re.split(r"[,\s]+", targets) if t]
    targets = list(targets or [])
    if not targets:
        raise AdapterConfigError("no target modules given")
    keys: set[str] = set()
    for t in targets:
        t = str(t).strip()
        if t == "all-linear":
            keys.update(mods)
            continue
        hit = set(_ALIASES[fam].get(t, ()))
        for k, suffix in mods.items():
            if suffix == t or suffix.endswith("." + t):
                hit.add(k)
        if not hit:
            choices = sorted(set(_ALIASES[fam]) | {s.split(".")[-1] for s in mods.values()} |
                             {s for s in mods.values()})
            raise AdapterConfigError(f"unknown target module {t!r} for a {fam} model; choose from "
                                     f"{', '.join(choices)} (or 'all-linear')")
        keys.update(hit)
    return [n for n in shapes if n.rsplit(".", 1)[-1] in keys and keep(n)]


def _is_names(s: str) -> bool:
    """A comma/space separated list of module names (anything else is a PEFT regex)."""
    return bool(re.fullmatch(r"[A-Za-z0-9_.,\s-]+", s))


def _peft_target_modules(cfg, names: Iterable[str]) -> list[str]:
    fam = _family_of(model_config(cfg))
    mods = _FAMILY_MODULES[fam]
    keys = {n.rsplit(".", 1)[-1] for n in names}
    out = []
    for k in mods:
        if k in keys:
            suffix = mods[k]
            # PEFT matches suffixes: the GPT-2 projections share "c_proj", so spell those with their parent
            out.append(suffix if fam == "gpt2" and suffix.endswith("c_proj") else suffix.split(".")[-1])
    return out


# ----------------------------------------------------------------------------------------- config
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
        if isinstance(self.r, bool) or not isinstance(self.r, (int, np.integer)) or self.r < 1:
            raise AdapterConfigError(f"LoRA rank r must be a positive integer, got {self.r!r}")
        if not (isinstance(self.alpha, (int, float, np.number)) and math.isfinite(self.alpha) and self.alpha > 0):
            raise AdapterConfigError(f"lora_alpha must be a positive number, got {self.alpha!r}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise AdapterConfigError(f"lora_dropout must be in [0, 1), got {self.dropout!r}")
        if not self.targets:
            raise AdapterConfigError("no target modules given")

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
        for k in ("use_dora",):
            if d.get(k):
                raise AdapterFormatError(f"{source}: {k}=true is not supported (plain LoRA only)")
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
        if isinstance(layers, int):
            layers = [layers]
        tm = d.get("target_modules") or []
        try:
            return cls(r=d["r"], alpha=d.get("lora_alpha", 8), targets=tm if isinstance(tm, str) else tuple(tm),
                       layers=None if layers is None else tuple(layers), dropout=float(d.get("lora_dropout") or 0.0),
                       rslora=bool(d.get("use_rslora", False)), base_model=d.get("base_model_name_or_path"),
                       rank_pattern=dict(d.get("rank_pattern") or {}), alpha_pattern=dict(d.get("alpha_pattern") or {}))
        except AdapterConfigError as e:
            raise AdapterConfigError(f"{source}: {e}") from None


def _pattern(table: Mapping, path: str | None, default):
    if path and table:
        for k, v in table.items():
            if path == k or re.fullmatch(rf"(.*\.)?{k}", path):
                return v
    return default


# ----------------------------------------------------------------------------------------- fingerprint
_DIM_KEYS = ("family", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "vocab_size")


def _dims(cfg) -> dict:
    cfg = model_config(cfg)
    return {k: getattr(cfg, k) for k in _DIM_KEYS}


def base_fingerprint(cfg, weights: Mapping[str, np.ndarray]) -> str:
    """A short hash identifying the base model: its dimensions and a strided fp16 sample of every linear
    (fp32 master weights and their fp16 inference copies give the same value)."""
    h = hashlib.sha256(json.dumps(_dims(cfg), sort_keys=True).encode())
    for n in sorted(linear_shapes(cfg)):
        a = np.asarray(weights[n]).ravel()
        step = max(1, a.size // 4096)
        h.update(n.encode())
        h.update(np.ascontiguousarray(a[::step], dtype="<f2").tobytes())
    return h.hexdigest()[:32]


# ----------------------------------------------------------------------------------------- adapter
class Adapter:
    """LoRA tensors for one model configuration: ``A[name]`` ``[r, in]``, ``B[name]`` ``[out, r]`` (float32,
    canonical names and orion layouts), the :class:`LoraConfig`, and optionally the base model's fingerprint.

    ``params()`` is a flat dict view (``<name>.lora_A`` / ``<name>.lora_B``) of the same arrays — what the
    trainer's optimizer updates in place."""

    def __init__(self, config: LoraConfig, model, A: Mapping[str, np.ndarray], B: Mapping[str, np.ndarray], *,
                 name: str | None = None, base: str | None = None, source: str | None = None):
        self.config = config
        self.model_config = model_config(model)
        self.family = _family_of(self.model_config)
        self.name = name
        self.base = base
        self.A = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in A.items()}
        self.B = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in B.items()}
        self._validate(source or name or "adapter")

    def _validate(self, source: str) -> None:
        shapes = linear_shapes(self.model_config)
        if set(self.A) != set(self.B):
            odd = sorted(set(self.A) ^ set(self.B))
            raise AdapterFormatError(f"{source}: lora_A and lora_B must come in pairs; unpaired: {odd[:4]}")
        if not self.A:
            raise AdapterFormatError(f"{source}: the adapter has no tensors")
        for n in self.A:
            if n not in shapes:
                raise AdapterMismatch(f"{source}: {n!r} is not a linear of this {self.family} model "
                                      f"({self.model_config.n_layers} layers)")
            out, inp = shapes[n]
            a, b = self.A[n], self.B[n]
            if a.ndim != 2 or b.ndim != 2:
                raise AdapterShapeError(f"{source}: {n}: lora_A {list(a.shape)} and lora_B {list(b.shape)} must be "
                                        f"matrices")
            if a.shape[1] != inp or b.shape[0] != out:
                raise AdapterShapeError(f"{source}: {module_path(self.model_config, n)}: lora_A {list(a.shape)} / "
                                        f"lora_B {list(b.shape)} do not fit the linear [out={out}, in={inp}] "
                                        f"(expected lora_A [r, {inp}], lora_B [{out}, r]) — an adapter for "
                                        f"another model?")
            if a.shape[0] != b.shape[1]:
                raise AdapterShapeError(f"{source}: {module_path(self.model_config, n)}: rank mismatch: lora_A has "
                                        f"{a.shape[0]} rows, lora_B {b.shape[1]} columns")
            want = self.config.rank_for(module_path(self.model_config, n))
            if a.shape[0] != want:
                raise AdapterShapeError(f"{source}: {module_path(self.model_config, n)}: rank mismatch: the config "
                                        f"says r={want}, the tensors have rank {a.shape[0]}")
            if not (np.isfinite(a).all() and np.isfinite(b).all()):
                raise AdapterFormatError(f"{source}: {n}: NaN/inf in the adapter tensors")
        self.A = {n: self.A[n] for n in shapes if n in self.A}     # canonical order
        self.B = {n: self.B[n] for n in self.A}

    # -- description ------------------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return list(self.A)

    @property
    def rank(self) -> int:
        return max(a.shape[0] for a in self.A.values())

    def scale(self, name: str) -> float:
        return self.config.scale_for(self.A[name].shape[0], module_path(self.model_config, name))

    def __repr__(self) -> str:
        keys = sorted({n.rsplit(".", 1)[-1] for n in self.A})
        return (f"<orion.lora.Adapter {self.name or ''} {self.family}: r={self.rank} alpha={self.config.alpha:g} "
                f"on {len(self.A)} linears ({', '.join(keys)})>")

    def params(self) -> dict[str, np.ndarray]:
        out = {}
        for n in self.A:
            out[n + ".lora_A"] = self.A[n]
            out[n + ".lora_B"] = self.B[n]
        return out

    def copy(self, name: str | None = None) -> "Adapter":
        return Adapter(self.config, self.model_config, {k: v.copy() for k, v in self.A.items()},
                       {k: v.copy() for k, v in self.B.items()}, name=name or self.name, base=self.base)

    def delta(self, name: str, dtype=np.float64) -> np.ndarray:
        """``scale · B A`` ``[out, in]`` of one linear."""
        return (self.scale(name) * (self.B[name].astype(dtype) @ self.A[name].astype(dtype))).astype(dtype)

    def check_model(self, model, weights: Mapping[str, np.ndarray] | None = None, *,
                    fingerprint: str | None = None) -> None:
        """Raises :class:`AdapterMismatch` unless this adapter fits ``model`` (dimensions and, when both are
        known, the base weights' fingerprint; ``fingerprint``: the base's, when already computed)."""
        cfg = model_config(model)
        mine, theirs = _dims(self.model_config), _dims(cfg)
        diff = [f"{k} {mine[k]} vs {theirs[k]}" for k in _DIM_KEYS if mine[k] != theirs[k]]
        if diff:
            raise AdapterMismatch(f"adapter {self.name or ''} was made for another model: {', '.join(diff)} "
                                  f"(adapter vs model)")
        if self.base and (weights is not None or fingerprint is not None):
            fp = fingerprint or base_fingerprint(cfg, weights)
            if fp != self.base:
                raise AdapterMismatch(f"adapter {self.name or ''} was trained on other base weights (fingerprint "
                                      f"{self.base[:12]}, this model {fp[:12]}); pass check_base=False to use it "
                                      f"anyway")

    # -- files --------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike, dtype=np.float32) -> str:
        return save(self, path, dtype=dtype)


def init_adapter(model, config: LoraConfig | str | None = None, *, seed: int = 0, base: Mapping | None = None,
                 b_std: float = 0.0, name: str | None = None) -> Adapter:
    """A new adapter as PEFT initialises one: A ~ U(-1/sqrt(in), 1/sqrt(in)) (Kaiming-uniform, a = sqrt 5),
    B = 0 (so the adapted model starts as the base model). ``b_std`` > 0 draws B ~ N(0, b_std) instead
    (tests, demos). ``base``: the base weights, recorded as a fingerprint."""
    cfg = model_config(model)
    if config is None:
        config = LoraConfig()
    elif isinstance(config, str):
        config = LoraConfig.parse(config)
    names = resolve_targets(cfg, config.targets, config.layers)
    shapes = linear_shapes(cfg)
    rng = np.random.default_rng(seed)
    A, B = {}, {}
    for n in names:
        out, inp = shapes[n]
        r = config.rank_for(module_path(cfg, n))
        bound = 1.0 / math.sqrt(inp)
        A[n] = rng.uniform(-bound, bound, (r, inp)).astype(np.float32)
        B[n] = (rng.standard_normal((out, r)) * b_std).astype(np.float32) if b_std else np.zeros((out, r), np.float32)
    fp = base_fingerprint(cfg, base) if base is not None else None
    return Adapter(config, cfg, A, B, name=name, base=fp)


# ----------------------------------------------------------------------------------------- layouts
def _to_hf_rows(cfg, name: str, b: np.ndarray) -> np.ndarray:
    from .models.loaders import permute_adjacent_to_rotate_half
    key = name.rsplit(".", 1)[-1]
    if cfg.family == "llama" and key in ("wq", "wk"):
        return permute_adjacent_to_rotate_half(b, cfg.n_heads if key == "wq" else cfg.n_kv_heads)
    return b


def _from_hf_rows(cfg, name: str, b: np.ndarray) -> np.ndarray:
    from .models.loaders import permute_rotate_half_to_adjacent
    key = name.rsplit(".", 1)[-1]
    if cfg.family == "llama" and key in ("wq", "wk"):
        return permute_rotate_half_to_adjacent(b, cfg.n_heads if key == "wq" else cfg.n_kv_heads)
    return b


def save(adapter: Adapter, path: str | os.PathLike, dtype=np.float32, base_model: str | None = None) -> str:
    """Writes a PEFT adapter folder (``adapter_model.safetensors`` + ``adapter_config.json``), each file
    atomically; returns the folder. Tensors use Hugging Face module paths and row orders."""
    from .fileio import atomic_write
    from .safetensors import write
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
    from .safetensors import SafetensorsFile
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


# ----------------------------------------------------------------------------------------- merging
def merge(weights: Mapping[str, np.ndarray], adapter: Adapter) -> dict[str, np.ndarray]:
    """New weight dict with ``W + scale · B A`` for every adapted linear (computed in float64, stored in
    W's dtype); other tensors are shared, not copied."""
    return _apply(weights, adapter, +1.0)


def unmerge(weights: Mapping[str, np.ndarray], adapter: Adapter) -> dict[str, np.ndarray]:
    """The inverse of :func:`merge`: ``W - scale · B A`` (exact up to the rounding of W's dtype)."""
    return _apply(weights, adapter, -1.0)


def _apply(weights, adapter: Adapter, sign: float) -> dict:
    out = dict(weights)
    for n in adapter.names:
        if n not in weights:
            raise AdapterMismatch(f"adapter targets {n!r}, which is not in the weights")
        w = np.asarray(weights[n])
        d = adapter.delta(n)
        if d.shape != w.shape:
            raise AdapterShapeError(f"{n}: adapter delta {list(d.shape)} vs weight {list(w.shape)}")
        out[n] = (w.astype(np.float64) + sign * d).astype(w.dtype)
    return out


# ----------------------------------------------------------------------------------------- programs
def slot_names(weight_name: str) -> tuple[str, str]:
    """Graph weight names of the A/B inputs next to baked weight ``weight_name``."""
    return f"{weight_name}_lora_a", f"{weight_name}_lora_b"


def graph_linear(g, x, weight_name: str, W, bias=None, slots=None, canonical: str | None = None):
    """``ops.linear`` with baked ``W``, plus a LoRA branch whose A/B are program inputs when ``slots``
    (an :class:`AdapterSlots`, or any mapping canonical name -> (A [R, in], B [out, R]) initial values)
    has ``canonical``. The model graph builders call this for every linear."""
    from .ir import ops
    w = g.weight(weight_name, W)
    ab = slots.get(canonical) if slots is not None and canonical is not None else None
    if ab is None:
        return ops.linear(x, w, bias)
    na, nb = slot_names(weight_name)
    if isinstance(slots, AdapterSlots):
        slots.graph_names[na] = (canonical, 0)
        slots.graph_names[nb] = (canonical, 1)
    return ops.lora_linear(x, w, g.weight(na, ab[0], dynamic=True), g.weight(nb, ab[1], dynamic=True), bias)


class AdapterSlots:
    """The adapter inputs of a model's programs: which linears have A/B inputs and their rank ``R``.

    ``get(name)`` gives the graph builders the current values (A zero-padded to ``[R, in]``, ``scale · B``
    zero-padded to ``[out, R]``; zeros where the current adapter has no tensor), so programs compiled
    later start with the current adapter; :meth:`assign` + :meth:`stage` swap adapters in programs that
    already exist (surface writes only)."""

    def __init__(self, cfg, names: Iterable[str], rank: int):
        self.cfg = model_config(cfg)
        shapes = linear_shapes(self.cfg)
        self.names = [n for n in shapes if n in set(names)]
        self.rank = int(rank)
        self.adapter: Adapter | None = None
        self.graph_names: dict[str, tuple[str, int]] = {}
        self._shapes = {n: shapes[n] for n in self.names}
        self._values = self._zeros()

    def _zeros(self) -> dict:
        return {n: (np.zeros((self.rank, inp), np.float32), np.zeros((out, self.rank), np.float32))
                for n, (out, inp) in self._shapes.items()}

    def covers(self, names: Iterable[str], rank: int) -> bool:
        return set(names) <= set(self.names) and rank <= self.rank

    def get(self, name: str):
        return self._values.get(name)

    def assign(self, adapter: Adapter | None) -> None:
        vals = self._zeros()
        if adapter is not None:
            if not self.covers(adapter.names, adapter.rank):
                raise AdapterShapeError(f"adapter (rank {adapter.rank} on {len(adapter.names)} linears) does not fit "
                                        f"the program slots (rank {self.rank} on {len(self.names)} linears)")
            for n in adapter.names:
                a, b = vals[n]
                r = adapter.A[n].shape[0]
                a[:r] = adapter.A[n]
                b[:, :r] = adapter.B[n] * adapter.scale(n)
        self._values = vals
        self.adapter = adapter

    def values_for(self, program) -> dict[str, np.ndarray]:
        """The current A/B arrays of every adapter input of ``program`` (a CompiledProgram), by weight name."""
        out = {}
        for wn in program.dynamic_weights:
            hit = self.graph_names.get(wn)
            if hit is not None:
                out[wn] = self._values[hit[0]][hit[1]]
        return out

    def stage(self, programs: Iterable) -> int:
        """Writes the current values into ``programs`` (CompiledPrograms); returns the surfaces written."""
        n = 0
        for cp in programs:
            vals = self.values_for(cp)
            if vals:
                cp.set_weights(**vals)
                n += len(vals)
        return n


def _engine_programs(engine) -> list:
    return [cp for stages in engine.sets.values() for st in stages for cp in st.programs]


def set_adapter(model, adapter, *, rank: int | None = None, targets=None, check_base: bool = True) -> None:
    """Runs ``model`` (an :class:`orion.models.Model`) with ``adapter`` from its next evaluation on: an
    :class:`Adapter`, a PEFT folder/file path, or None for the base model.

    The stage programs get A/B inputs for the adapted linears the first time an adapter needs them
    (``rank`` / ``targets`` reserve more: any adapter within the slots then swaps with zero compiles and
    zero loads — only surface writes; None stages zeros, which gives the base model's outputs exactly).
    An adapter outside the current slots widens them and the programs are compiled again at their next
    use (logged). Swap between generations: the KV cache of a running generation is not recomputed."""
    cfg = model.config
    if isinstance(adapter, (str, os.PathLike)):
        adapter = load(adapter, cfg, check_base=False)
    elif adapter is not None and not isinstance(adapter, Adapter):
        raise AdapterConfigError(f"set_adapter expects an orion.lora.Adapter, a path or None, got "
                                 f"{type(adapter).__name__}")
    if adapter is not None:
        fp = None
        if check_base and adapter.base:
            fp = getattr(model, "_lora_base_fp", None)
            if fp is None or fp[0] is not model.weights:
                fp = (model.weights, base_fingerprint(cfg, model.weights))     # once per model
                model._lora_base_fp = fp
            fp = fp[1]
        adapter.check_model(cfg, fingerprint=fp)
    names = set(adapter.names) if adapter is not None else set()
    if targets is not None:
        names |= set(resolve_targets(cfg, targets))
    want_rank = max([adapter.rank if adapter is not None else 0, int(rank or 0)])
    slots: AdapterSlots | None = getattr(model, "_lora_slots", None)
    if slots is None and not names:
        model._lora_adapter = None
        return
    if slots is None or not slots.covers(names, want_rank):
        if slots is not None:
            names |= set(slots.names)
            want_rank = max(want_rank, slots.rank)
        slots = AdapterSlots(cfg, names, max(1, want_rank))
        model._lora_slots = slots
        eng = getattr(model, "_engine", None)
        if eng is not None:
            if eng.sets:
                log.info("orion: the adapter needs new program inputs (rank %d on %d linears): the stage programs "
                         "are compiled again at their next use", slots.rank, len(slots.names))
                for stages in eng.sets.values():
                    for st in stages:
                        st.release()
                eng.sets.clear()
            eng.graph_options["lora"] = slots
    slots.assign(adapter)
    model._lora_adapter = adapter
    eng = getattr(model, "_engine", None)
    if eng is not None:
        eng.graph_options["lora"] = slots
        slots.stage(_engine_programs(eng))


def get_adapter(model) -> Adapter | None:
    return getattr(model, "_lora_adapter", None)
