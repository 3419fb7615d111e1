"""Deep copies of the committed family fixtures (tests/fixtures/models): the same family, tokenizer and
config at 36 layers (or any depth), layer i holding the tensors of the fixture's layer i mod its depth,
with the projections that write into the residual stream scaled by sqrt(depth / new depth) so the
stream grows as in the shallow model. Written as HF folders (bf16 where the fixture is, else fp32)
with the fixture's tokenizer; tests compare them with the independent float64 reference
(orion.models.reference, itself pinned to transformers on the fixtures)."""

from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np

from ckpt_writers import write_safetensors
from orion.native.safetensors import read_safetensors

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
FAMILIES = ("llama3", "qwen2", "qwen3", "mistral", "gemma3", "phi3", "smollm2")
COPY = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.*)$")
_WRITES_STREAM = ("o_proj.weight", "down_proj.weight")


def make_deep(family: str, out: str, layers: int = 36) -> str:
    """Writes the ``layers``-deep copy of fixture ``family`` into folder ``out``; returns ``out``."""
    src = os.path.join(FIXTURES, family)
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    base = int(cfg["num_hidden_layers"])
    tensors = read_safetensors(os.path.join(src, "model.safetensors"))
    bf16 = "bfloat16" in str(cfg.get("dtype", cfg.get("torch_dtype", "")))
    gain = np.float32(np.sqrt(base / layers))
    deep = {}
    for name, a in tensors.items():
        m = _LAYER.match(name)
        if m is None:
            deep[name] = np.asarray(a, np.float32)
            continue
        i, rest = int(m.group(1)), m.group(2)
        for j in range(i, layers, base):
            scale = gain if rest.endswith(_WRITES_STREAM) else 1
            deep[f"model.layers.{j}.{rest}"] = np.asarray(a, np.float32) * scale
    cfg["num_hidden_layers"] = layers
    if isinstance(cfg.get("layer_types"), list):
        cfg["layer_types"] = [cfg["layer_types"][j % base] for j in range(layers)]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    write_safetensors(os.path.join(out, "model.safetensors"), deep, metadata={"format": "pt"}, bf16=bf16)
    for name in COPY:
        if os.path.exists(os.path.join(src, name)):
            shutil.copy(os.path.join(src, name), os.path.join(out, name))
    return out


def prompt_ids(family: str, n: int = 20) -> list[int]:
    return np.load(os.path.join(FIXTURES, family, "reference.npz"))["ids"][:n].tolist()
