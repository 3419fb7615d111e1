"""The adapter of an ``orion train --lora`` run: a LoRA checkpoint holds the adapter tensors and names the
model it was trained on (its ``--model``), so the run alone is enough to generate with (``orion generate
--model RUN``) or to fuse (``orion fuse --adapter-path RUN``). Runs are training's files, so this lives in
:mod:`orion.train`, above :mod:`orion.lora`, which training builds on."""

from __future__ import annotations

import os

from ..lora import Adapter, LoraConfig, merge
from ..lora import load as load_adapter
from ..lora.errors import AdapterConfigError, AdapterFormatError
from ..lora.files import read_config
from ..models.loaders import load_weights
from ..models.model import resolve_model_path
from . import checkpoint as ck
from .checkpoint import _check_writable
from .model import config_from_state, write_hf

__all__ = ["is_lora_run", "run_adapter", "fuse"]


def is_lora_run(path) -> bool:
    """Whether ``path`` is an orion train run (or one of its step folders) that trained LoRA adapters."""
    path = os.fspath(path)
    if not ck.is_run(path):
        return False
    return bool(ck.read_state(path).get("lora"))


def run_adapter(path) -> tuple[str, Adapter]:
    """(the base model's path, the :class:`Adapter` of the run's latest checkpoint, or of that step folder)."""
    step = ck.resolve(os.fspath(path))
    c = ck.load(step)
    state = c.state
    if not state.get("lora"):
        raise AdapterFormatError(f"{step}: not a LoRA run (its checkpoints hold a whole model: load it as one)")
    config = LoraConfig.from_dict(state["lora"])
    base = state.get("init") or config.base_model
    if not base:
        raise AdapterFormatError(f"{step}: the run does not name its base model; pass it: --model BASE "
                                 f"--adapter-path {os.path.join(os.path.dirname(step), 'adapter')}")
    A = {k[:-len(".lora_A")]: v for k, v in c.params.items() if k.endswith(".lora_A")}
    B = {k[:-len(".lora_B")]: v for k, v in c.params.items() if k.endswith(".lora_B")}
    cfg = config_from_state(state["model"], step)
    return base, Adapter(config, cfg, A, B, name=os.path.basename(step), base=state.get("lora_base"), source=step)


def fuse(adapter, save_path, model=None) -> tuple[str, Adapter]:
    """Merges an adapter into its base and writes a Hugging Face folder (the family's config.json,
    model.safetensors in fp16, the base's tokenizer files) at ``save_path`` (new or empty):
    ``adapter`` an orion train --lora run (or step folder), which names its base, or a PEFT folder (then
    ``model``, the base's path or Hub id, is required; given with a run, it replaces the run's base).
    Returns (the base's path, the adapter); what ``orion fuse`` runs."""
    save = os.path.abspath(os.fspath(save_path))
    _check_writable(save)                                   # refused before anything is read
    adapter = os.fspath(adapter)
    if not os.path.exists(adapter):
        raise AdapterConfigError(f"adapter {adapter}: no such file or folder")
    if is_lora_run(adapter):
        base, ad = run_adapter(adapter)
        base = model or base
    else:
        read_config(adapter)                                # a typed error for a folder that is no adapter
        if not model:
            raise AdapterConfigError(f"adapter {adapter} is a PEFT folder: give its base model (--model)")
        base, ad = model, None
    path = resolve_model_path(base)
    ck = load_weights(path)
    if ck.config.family != "llama":
        raise AdapterConfigError(f"{path}: orion fuses adapters of Llama-style models (GPT-2 has no adapters)")
    if ad is None:
        ad = load_adapter(adapter, ck.config, ck.weights)
    else:
        ad.check_model(ck.config, ck.weights)
    write_hf(save, ck.config, merge(ck.weights, ad), tokenizer_from=path if os.path.isdir(path) else None)
    return path, ad
