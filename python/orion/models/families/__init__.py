"""Model families: how each Hugging Face ``model_type`` maps onto orion's two graph builders.

One module per family. Each says which ``config.json`` keys it reads (and refuses what it does not
implement, see :mod:`.hf_keys`), how its tensors are named (fused projections are split on load and
fused again on export) and what ``config.json`` it writes back. The graphs themselves are shared:
:mod:`orion.models.gpt2` for GPT-2 and :mod:`orion.models.llama` for every Llama-style decoder, whose
feature switches (biases, q/k norms, sandwich norms, GeGLU, sliding windows, soft-capping) are fields
of :class:`orion.models.config.LlamaConfig`.

Adding a family: a module with ``MODEL_TYPES``, ``ARCHITECTURES``, ``read_config(reader)``,
``layer_tensors(cfg)`` and ``hf_config(cfg)``, listed in ``_MODULES``.
"""

from __future__ import annotations

from ...errors import ModelFormatError
from . import gemma, gpt2, llama, mistral, phi, qwen
from .hf_keys import ConfigReader

__all__ = ["family_module", "config_from_hf", "SUPPORTED"]

_MODULES = (gpt2, llama, qwen, mistral, gemma, phi)
_BY_TYPE = {mt: m for m in _MODULES for mt in m.MODEL_TYPES}
_BY_ARCH = {a: m for m in _MODULES for a in m.ARCHITECTURES}
SUPPORTED = tuple(_BY_TYPE)


def family_module(model_type: str):
    """The family module of a ``model_type`` (as :class:`LlamaConfig.model_type` records it)."""
    try:
        return _BY_TYPE[model_type]
    except KeyError:
        raise ModelFormatError(f"unsupported model_type {model_type!r} (supported: {', '.join(SUPPORTED)})") from None


def config_from_hf(d: dict, source: str = "config.json"):
    """A :class:`GPT2Config` or :class:`LlamaConfig` from a Hugging Face ``config.json`` dict."""
    if not isinstance(d, dict):
        raise ModelFormatError(f"{source}: expected a JSON object, got {type(d).__name__}")
    mt = d.get("model_type")
    archs = d.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ModelFormatError(f"{source}: config key 'architectures' must be a list of names, got {archs!r}")
    if mt is not None and not isinstance(mt, str):
        raise ModelFormatError(f"{source}: config key 'model_type' must be a string, got {mt!r}")
    mod = _BY_TYPE.get(mt) if mt is not None else next((_BY_ARCH[a] for a in archs if a in _BY_ARCH), None)
    if mod is None:
        raise ModelFormatError(f"{source}: unsupported architecture: model_type {mt!r} architectures {archs!r} "
                               f"(supported model types: {', '.join(SUPPORTED)})")
    bad = [a for a in archs if a not in mod.ARCHITECTURES]
    if bad:
        raise ModelFormatError(f"{source}: architectures {bad} are not causal language models orion runs for "
                               f"model_type {mt!r} (expected one of {', '.join(mod.ARCHITECTURES)})")
    r = ConfigReader(d, source, mod.DEFAULTS)
    cfg = mod.read_config(r)
    r.finish(getattr(mod, "HARMLESS", frozenset()))
    return cfg
