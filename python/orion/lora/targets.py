"""Which linears an adapter may target: canonical names, Hugging Face / PEFT module paths, shapes, and
the target-module rule (short names, HF names, PEFT suffixes, ``"all-linear"``, regexes)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from .errors import AdapterConfigError

# Where a layer's modules live (Hugging Face paths) and what orion calls the layer (canonical names).
_LAYER_PATH = {"llama": "model.layers.{}.", "gpt2": "transformer.h.{}."}
_CANON_PREFIX = {"llama": "layers", "gpt2": "h"}
_PATH_RE = {"llama": re.compile(r"^model\.layers\.(\d+)\.(.+)$"), "gpt2": re.compile(r"^transformer\.h\.(\d+)\.(.+)$")}
# orion's short names for the canonical linears (the Hugging Face names come from models/families)
_ALIASES = {
    "llama": {"q": ("wq",), "k": ("wk",), "v": ("wv",), "o": ("wo",), "gate": ("w1",), "up": ("w3",),
              "down": ("w2",), "wq": ("wq",), "wk": ("wk",), "wv": ("wv",), "wo": ("wo",), "w1": ("w1",),
              "w2": ("w2",), "w3": ("w3",), "qkv": ("wq", "wk", "wv"), "gate_up": ("w1", "w3"),
              "attn": ("wq", "wk", "wv", "wo"), "ffn": ("w1", "w2", "w3"), "mlp": ("w1", "w2", "w3")},
    "gpt2": {"qkv": ("wqkv",), "wqkv": ("wqkv",), "o": ("wo",), "wo": ("wo",), "fc": ("wfc",), "wfc": ("wfc",),
             "proj": ("wproj",), "wproj": ("wproj",), "attn": ("wqkv", "wo"), "ffn": ("wfc", "wproj"),
             "mlp": ("wfc", "wproj")},
}


@dataclass(frozen=True)
class Module:
    """One Hugging Face linear inside a layer: its module suffix (``self_attn.qkv_proj``) and the canonical
    linears it holds with their rows — several for a fused module (Phi-3's q|k|v), stacked along the rows."""
    suffix: str
    parts: tuple

    @property
    def keys(self) -> tuple:
        return tuple(k for k, _ in self.parts)

    @property
    def fused(self) -> bool:
        return len(self.parts) > 1


def _family_of(cfg) -> str:
    fam = getattr(cfg, "family", None)
    if fam not in _LAYER_PATH:
        raise AdapterConfigError(f"LoRA supports Llama-style and GPT-2 models, got family {fam!r}")
    return fam


def _layer_tensors(cfg) -> dict:
    """HF tensor suffix inside a layer -> canonical key, or ((key, rows), ...) for a fused tensor."""
    from ..models.families import family_module  # circle: orion.models (layer_params) imports orion.lora
    return family_module(cfg.model_type).layer_tensors(cfg)


_MODULES_CACHE: dict = {}


def modules(cfg) -> list[Module]:
    """The linears of one layer as Hugging Face names them (the family module's order): every matrix
    of ``layer_tensors`` (norms and biases are not LoRA targets)."""
    cfg = model_config(cfg)
    key = repr(cfg)                  # configs are mutable dataclasses: key by value
    if key not in _MODULES_CACHE:
        if len(_MODULES_CACHE) > 64:
            _MODULES_CACHE.clear()
        _MODULES_CACHE[key] = _modules(cfg)
    return _MODULES_CACHE[key]


def _modules(cfg) -> list[Module]:
    from ..models.loaders import expected_shapes  # circle: orion.models (layer_params) imports orion.lora
    p = f"{_CANON_PREFIX[_family_of(cfg)]}.0."
    shapes = {n[len(p):]: s for n, s in expected_shapes(cfg).items() if n.startswith(p)}
    out = []
    for hf, spec in _layer_tensors(cfg).items():
        parts = spec if isinstance(spec, tuple) else ((spec, None),)
        if hf.endswith(".weight") and all(len(shapes.get(k, ())) == 2 for k, _ in parts):
            out.append(Module(hf[:-len(".weight")], tuple((k, r or shapes[k][0]) for k, r in parts)))
    return out


def model_config(cfg):
    """``orion.models`` configuration of ``cfg`` (the config itself, or anything with a ``config`` attribute,
    e.g. a Model)."""
    if getattr(cfg, "family", None) in _LAYER_PATH:
        return cfg
    inner = getattr(cfg, "config", None)
    if inner is not None and getattr(inner, "family", None) in _LAYER_PATH:
        return inner
    raise AdapterConfigError(f"expected a model configuration (GPT2Config, LlamaConfig) or a Model, got "
                             f"{type(cfg).__name__}")


def linear_shapes(cfg) -> dict[str, tuple[int, int]]:
    """Canonical name -> ``(out, in)`` of every linear an adapter may target (q: ``n_heads * head_dim`` rows)."""
    from ..models.loaders import expected_shapes  # circle: orion.models (layer_params) imports orion.lora
    cfg = model_config(cfg)
    keys = {k for m in modules(cfg) for k in m.keys}
    return {n: tuple(s) for n, s in expected_shapes(cfg).items() if n.count(".") == 2 and n.rsplit(".", 1)[-1] in keys}


def _module_of(cfg, canonical: str) -> tuple[int, Module]:
    _, layer, key = canonical.split(".")
    for m in modules(cfg):
        if key in m.keys:
            return int(layer), m
    raise AdapterConfigError(f"{canonical!r} is not a linear of this {_kind(cfg)} model")


def module_path(cfg, canonical: str) -> str:
    """``layers.3.wq`` -> ``model.layers.3.self_attn.q_proj`` (the Hugging Face / PEFT module path; for a
    fused projection the fused module: ``model.layers.3.self_attn.qkv_proj`` on Phi-3)."""
    cfg = model_config(cfg)
    layer, m = _module_of(cfg, canonical)
    return _LAYER_PATH[_family_of(cfg)].format(layer) + m.suffix


def module_parts(cfg, path: str) -> tuple | None:
    """``((canonical name, rows), ...)`` of the linears the module at ``path`` holds (one unless fused);
    None when ``path`` is not a linear of this model."""
    cfg = model_config(cfg)
    fam = _family_of(cfg)
    hit = _PATH_RE[fam].match(path)
    if not hit:
        return None
    m = next((m for m in modules(cfg) if m.suffix == hit.group(2)), None)
    layer = f"{_CANON_PREFIX[fam]}.{int(hit.group(1))}."
    return None if m is None else tuple((layer + k, r) for k, r in m.parts)


def canonical_name(cfg, path: str) -> str | None:
    """The inverse of :func:`module_path` for a module holding one linear (None when ``path`` is not a
    linear of this model or a fused one: see :func:`module_parts`)."""
    parts = module_parts(cfg, path)
    return parts[0][0] if parts is not None and len(parts) == 1 else None


def _kind(cfg) -> str:
    return getattr(cfg, "model_type", None) or cfg.family


def _aliases(cfg) -> dict:
    """Short name -> canonical keys: orion's names, plus for Llama-style families the Llama module names
    (``q_proj``, ...) so that a fused family can say what to target instead."""
    out = dict(_ALIASES[cfg.family])
    if cfg.family == "llama":
        from ..models.families.llama import BASE_LAYER  # circle: orion.models (layer_params) imports orion.lora
        out.update({hf[:-len(".weight")].rsplit(".", 1)[-1]: (k,) for hf, k in BASE_LAYER.items()
                    if hf.endswith("_proj.weight")})
    return out


def resolve_targets(cfg, targets, layers: Iterable[int] | None = None) -> list[str]:
    """Canonical names of the linears selected by ``targets`` (see the module docstring) in ``layers``
    (None: every layer), ordered by layer. Unknown names, and part of a fused module (Phi-3's q without
    k and v: a PEFT file adapts ``qkv_proj`` as one), raise :class:`AdapterConfigError`."""
    cfg = model_config(cfg)
    mods = modules(cfg)
    shapes = linear_shapes(cfg)
    if layers is not None:
        layers = sorted({int(i) for i in layers})
        bad = [i for i in layers if not 0 <= i < cfg.n_layers]
        if bad:
            raise AdapterConfigError(f"layers {bad} out of range: the model has {cfg.n_layers} layers")
    keep = (lambda n: int(n.split(".")[1]) in layers) if layers is not None else (lambda n: True)
    paths = {n: module_path(cfg, n) for n in shapes}
    if isinstance(targets, (list, tuple)) and len(targets) == 1 and not _is_names(targets[0]):
        targets = targets[0]                   # a PEFT regex kept in a one-element tuple by LoraConfig
    if isinstance(targets, str) and (targets == "all-linear" or not _is_names(targets)):
        if targets == "all-linear":
            return [n for n in shapes if keep(n)]
        try:
            rx = re.compile(targets)
        except re.error as e:
            raise AdapterConfigError(f"target_modules regex {targets!r} is invalid: {e}") from None
        out = [n for n, path in paths.items() if keep(n) and rx.fullmatch(path)]
        if not out:
            raise AdapterConfigError(f"target_modules regex {targets!r} matches no linear of this {_kind(cfg)} model")
        return out
    if isinstance(targets, str):
        targets = [t for t in re.split(r"[,\s]+", targets) if t]
    targets = list(targets or [])
    if not targets:
        raise AdapterConfigError("no target modules given")
    aliases = _aliases(cfg)
    chosen: set[str] = set()
    for t in targets:
        t = str(t).strip()
        hit = set(shapes) if t == "all-linear" else {n for n in shapes if n.rsplit(".", 1)[-1] in aliases.get(t, ())}
        # PEFT's rule: the module path itself or a dotted suffix of it
        hit.update(n for n, path in paths.items() if path == t or path.endswith("." + t))
        if not hit:
            choices = sorted(set(_ALIASES[cfg.family]) | {m.suffix.rsplit(".", 1)[-1] for m in mods} |
                             {m.suffix for m in mods})
            raise AdapterConfigError(f"unknown target module {t!r} for a {_kind(cfg)} model; choose from "
                                     f"{', '.join(choices)} (or 'all-linear')")
        chosen.update(hit)
    for group in fused_groups(cfg, chosen):
        m = _module_of(cfg, group[0])[1]
        if len(group) < len(m.keys):
            short: dict = {}
            for a, ks in _ALIASES[cfg.family].items():
                short.setdefault(ks, a)                   # the first (shortest-to-type) name of each
            raise AdapterConfigError(
                f"a {_kind(cfg)} model fuses {', '.join(short[(k,)] for k in m.keys)} into one module {m.suffix!r}, "
                f"which a PEFT adapter adapts as a whole (one lora_A, lora_B stacked by rows): an adapter on "
                f"{', '.join(short[(n.rsplit('.', 1)[-1],)] for n in group)} alone cannot be written exactly; target "
                f"{short.get(m.keys, m.suffix)!r} (or {','.join(short[(k,)] for k in m.keys)} together)")
    return [n for n in shapes if n in chosen and keep(n)]


def fused_groups(cfg, names: Iterable[str]) -> list[tuple[str, ...]]:
    """The canonical names among ``names`` that share one fused module (and so one lora_A in a PEFT file),
    one tuple per module and layer."""
    cfg = model_config(cfg)
    names = set(names)
    out = []
    for i in range(cfg.n_layers):
        for m in modules(cfg):
            group = tuple(f"{_CANON_PREFIX[cfg.family]}.{i}.{k}" for k in m.keys)
            if m.fused and any(n in names for n in group):
                out.append(tuple(n for n in group if n in names))
    return out


def _is_names(s: str) -> bool:
    """A comma/space separated list of module names (anything else is a PEFT regex)."""
    return bool(re.fullmatch(r"[A-Za-z0-9_.,\s-]+", s))


def _peft_target_modules(cfg, names: Iterable[str]) -> list[str]:
    """PEFT's ``target_modules`` for an adapter on ``names``: module leaf names, spelled with their parent
    where the leaf is ambiguous (PEFT matches suffixes: GPT-2's ``attn.c_proj`` / ``mlp.c_proj``)."""
    mods = modules(cfg)
    keys = {n.rsplit(".", 1)[-1] for n in names}
    leaves = [m.suffix.rsplit(".", 1)[-1] for m in mods]
    return [m.suffix if leaves.count(leaf) > 1 else leaf for m, leaf in zip(mods, leaves) if set(m.keys) & keys]
