#!/usr/bin/env python3
"""Generate PEFT LoRA adapters and their reference logits in tests/fixtures/lora/ (LoRA on
every family, checked against PEFT itself).

Run from the repository root (needs torch, transformers 5.x and peft; no network):

    . /work/venv/bin/activate
    pip install peft                               # only this script needs it
    python scripts/make_lora_fixtures.py           # every folder
    python scripts/make_lora_fixtures.py phi3      # some folders

For each model fixture in tests/fixtures/models/<name>: PEFT wraps the checkpoint with a LoRA on every
linear ("all-linear": the fused qkv_proj / gate_up_proj of Phi-3 as PEFT sees them), with per-module
rank/alpha overrides (rank_pattern, alpha_pattern) to pin PEFT's scale rule; A and B are seeded normal
values rounded to fp16 (what orion's fp16 programs hold). ``save_pretrained`` writes the adapter
folder; reference.npz holds ``ids`` (the model fixture's prompt) and ``logits`` float32 [n, vocab]
of the adapted model (fp32, eager attention, every position; the model fixture's reference.npz has the
base model's).
Everything is seeded: re-running rewrites the same values (same library versions).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests/fixtures/models"
OUT = ROOT / "tests/fixtures/lora"

NAMES = ("qwen2", "qwen3", "phi3", "gemma3")
RANK, ALPHA = 4, 8
RANK_PATTERN = {"o_proj": 2}          # o_proj: r=2 (scale 8 / 2)
ALPHA_PATTERN = {"down_proj": 2}      # down_proj: scale 2 / 4
A_STD, B_STD = 0.3, 0.15


def make(name: str) -> None:
    src = MODELS / name
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, attn_implementation="eager").eval()
    ref = np.load(src / "reference.npz")
    ids, base = torch.tensor(ref["ids"][None]), ref["logits"]      # the model fixture's prompt and logits
    cfg = LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules="all-linear", rank_pattern=RANK_PATTERN,
                     alpha_pattern=ALPHA_PATTERN, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, cfg).eval()
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    with torch.no_grad():
        for pname, p in sorted(peft_model.named_parameters()):
            if ".lora_A." in pname or ".lora_B." in pname:
                std = A_STD if ".lora_A." in pname else B_STD
                v = torch.randn(p.shape, generator=gen) * std
                p.copy_(v.to(torch.float16).to(torch.float32))
        logits = peft_model(ids).logits[0].numpy()
    out = OUT / name
    out.mkdir(parents=True, exist_ok=True)
    peft_model.peft_config["default"].base_model_name_or_path = f"tests/fixtures/models/{name}"
    peft_model.save_pretrained(out)
    (out / "README.md").unlink()                   # PEFT's model card template: nothing the tests read
    conf = json.loads((out / "adapter_config.json").read_text())
    conf["target_modules"] = sorted(conf["target_modules"])       # PEFT writes a set: make the file stable
    (out / "adapter_config.json").write_text(json.dumps(conf, indent=2, sort_keys=True) + "\n")
    np.savez_compressed(out / "reference.npz", ids=ids[0].numpy().astype(np.int64), logits=logits.astype(np.float32))
    moved = np.abs(logits - base).max() / np.abs(base).max()
    print(f"{name}: {sum(1 for n, _ in peft_model.named_parameters() if '.lora_A.' in n)} adapted modules, "
          f"adapter moves logits by {moved:.2f} of max |logit|")


def main(argv: list[str]) -> int:
    for name in argv or NAMES:
        make(name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
