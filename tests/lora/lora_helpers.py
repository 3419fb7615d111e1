"""Helpers for the per-family LoRA tests: the model fixtures (tests/fixtures/models, transformers-made
checkpoints of every family) and the PEFT-made adapters for some of them (tests/fixtures/lora)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from orion import lora as L
from orion.models import loaders

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
MODELS = FIXTURES / "models"
ADAPTERS = FIXTURES / "lora"
# every model fixture folder (each family and config form); PEFT adapters made by scripts/make_lora_fixtures.py
MODEL_NAMES = ("llama3", "smollm2", "llama_linear", "llama_legacy_keys", "qwen2", "qwen3", "mistral", "gemma3",
               "gemma3_legacy_keys", "phi3")
PEFT_NAMES = ("qwen2", "qwen3", "phi3", "gemma3")


def checkpoint(name: str):
    """The fixture's checkpoint as orion reads it (canonical float32 weights)."""
    folder = MODELS / name
    if not (folder / "config.json").exists():
        pytest.skip(f"model fixture tests/fixtures/models/{name} missing (scripts/make_model_fixtures.py)")
    return loaders.read_checkpoint(str(folder))


def prompt_ids(name: str) -> list[int]:
    return [int(t) for t in np.load(MODELS / name / "reference.npz")["ids"]]


def fp16(w: dict) -> dict:
    return {k: np.asarray(v, np.float32).astype(np.float16) for k, v in w.items()}


def adapter(cfg, targets="all-linear", r=4, alpha=8, seed=1, b_std=0.05) -> L.Adapter:
    """A random adapter (non-zero B) rounded to fp16, what the programs hold; alpha / r a power of two."""
    ad = L.init_adapter(cfg, L.LoraConfig(r=r, alpha=alpha, targets=targets), seed=seed, b_std=b_std)
    for d in (ad.A, ad.B):
        for k in d:
            d[k] = d[k].astype(np.float16).astype(np.float32)
    return ad


def peft_folder(name: str) -> Path:
    folder = ADAPTERS / name
    if not (folder / L.ADAPTER_WEIGHTS).exists():
        pytest.skip(f"PEFT fixture tests/fixtures/lora/{name} missing (scripts/make_lora_fixtures.py)")
    return folder
