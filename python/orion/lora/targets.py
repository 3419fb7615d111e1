"""Which linears an adapter may target: canonical names, Hugging Face / PEFT module paths, shapes, and
the target-module rule (short names, HF names, PEFT suffixes, ``"all-linear"``, regexes)."""

from __future__ import annotations

import re
from typing import Iterable

from .errors import AdapterConfigError

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
        from ..train.model import to_models_config
        return to_models_config(cfg)
    raise AdapterConfigError(f"expected a model configuration (GPT2Config, LlamaConfig, a training ModelConfig) or a "
                             f"Model, got {type(cfg).__name__}")


def linear_shapes(cfg) -> dict[str, tuple[int, int]]:
    """Canonical name -> ``(out, in)`` of every linear an adapter may target."""
    from ..models.loaders import expected_shapes
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
