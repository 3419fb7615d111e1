"""The adapter of an ``orion train --lora`` run: a LoRA checkpoint holds the adapter tensors and names the
model it was trained on (its ``--init``), so the run alone is enough to generate with (``orion generate
--model RUN``) or to fuse (``orion fuse --adapter RUN``)."""

from __future__ import annotations

import os

from .adapter import Adapter
from .config import LoraConfig
from .errors import AdapterFormatError

__all__ = ["is_lora_run", "run_adapter"]


def is_lora_run(path) -> bool:
    """Whether ``path`` is an orion train run (or one of its step folders) that trained LoRA adapters."""
    from ..train import checkpoint as ck
    path = os.fspath(path)
    if not ck.is_run(path):
        return False
    return bool(ck.read_state(path).get("lora"))


def run_adapter(path) -> tuple[str, Adapter]:
    """(the base model's path, the :class:`Adapter` of the run's latest checkpoint, or of that step folder)."""
    from ..train import checkpoint as ck
    from ..train.model import config_from_state
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
