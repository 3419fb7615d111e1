#!/usr/bin/env python3
"""Everything a user does with a 30-layer model at real width, in ONE process within the device's
compile budget (C05: ~119 compiles per process, enforced by the simulator):

a SmolLM2-135M-shaped Llama (30 layers, d_model 576, 9 / 3 heads, d_ff 1536, vocab 32,000, tied embeddings,
random fp16 weights; the smollm2 fixture's tokenizer and ChatML template) - generate with fp16, int8,
lut4 and int4 weights and W8A8 (int8 activations too), generate_batch of 8 prompts, speculative decoding with a
2-layer draft of the same shape, a LoRA adapter swap and Model.chat - then ``orion train --model M --lora r=8,alpha=16`` on it in a
second process. Prints each step's compiles, time and the process's peak RSS; exits 1 if the model alone
needs more than 60.

    PYTHONPATH=python:BUILD python scripts/check_real_depth.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "models", "smollm2")
SHAPE = dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3,
             head_dim=64, vocab_size=32000, max_position_embeddings=2048)


def write_model(out: str, layers: int, seed: int) -> str:
    """A random HF Llama folder of the SmolLM2-135M shape with ``layers`` layers."""
    from orion.native.safetensors import write_safetensors
    cfg = json.load(open(os.path.join(TOKENIZER, "config.json")))
    cfg.update(SHAPE, num_hidden_layers=layers, dtype="float16")
    rng = np.random.default_rng(seed)
    d, f, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd

    def rnd(*shape, std=0.02):
        return (rng.standard_normal(shape) * std).astype(np.float16)
    t = {"model.embed_tokens.weight": rnd(cfg["vocab_size"], d), "model.norm.weight": np.ones(d, np.float16)}
    for i in range(layers):
        p = f"model.layers.{i}."
        t.update({p + "input_layernorm.weight": np.ones(d, np.float16),
                  p + "post_attention_layernorm.weight": np.ones(d, np.float16),
                  p + "self_attn.q_proj.weight": rnd(q, d), p + "self_attn.k_proj.weight": rnd(kv, d),
                  p + "self_attn.v_proj.weight": rnd(kv, d), p + "self_attn.o_proj.weight": rnd(d, q),
                  p + "mlp.gate_proj.weight": rnd(f, d), p + "mlp.up_proj.weight": rnd(f, d),
                  p + "mlp.down_proj.weight": rnd(d, f)})
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=1)
    write_safetensors(os.path.join(out, "model.safetensors"), t, metadata={"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(TOKENIZER, name), os.path.join(out, name))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keep", default=None, help="write the models here (default: a temporary folder)")
    a = ap.parse_args(argv)
    import orion
    from orion.lora import LoraConfig, init_adapter
    from orion.models import load
    work = a.keep or tempfile.mkdtemp(prefix="orion-depth-")
    path = write_model(os.path.join(work, "smollm2-135m-shape"), 30, 0)
    draft_path = write_model(os.path.join(work, "draft-2-layers"), 2, 1)
    orion.sim.reset_compile_budget()
    used = lambda: orion.sim.compile_budget()[0]  # noqa: E731
    prompt = "Once upon a time, a little fox named Tom found a shiny red ball"
    rows = []

    def step(what, fn):
        c0, t = used(), time.perf_counter()
        out = fn()
        rows.append((what, used() - c0, time.perf_counter() - t))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{what:55s} compiles +{rows[-1][1]:3d} (process {used():3d} of 119)  {rows[-1][2]:6.1f} s  "
              f"peak RSS {rss:5.0f} MB", flush=True)
        return out

    m = load(path, device="sim")
    draft = load(draft_path, device="sim")
    print(repr(m))
    step("engine: the fp16 probe on the definition (160 tokens)", lambda: m.engine)
    step("compile plan (no compiling)", m.compile_plan)
    step("generate 16 tokens, fp16", lambda: m.generate(prompt, max_tokens=16))
    step("generate_batch of 8 prompts", lambda: m.generate_batch([prompt[:20 + 5 * i] for i in range(8)], max_tokens=8))
    alone = m.generate(prompt, max_tokens=8, stop_tokens=[]).tokens
    spec = step("speculative, 2-layer draft, k=4", lambda: m.generate(prompt, max_tokens=8, stop_tokens=[],
                                                                       speculative=draft, draft_k=4))
    assert spec.tokens == alone, "speculative greedy must give the same tokens"
    ad = init_adapter(m, LoraConfig(r=8, alpha=16, targets=["q", "v"]), seed=1, b_std=0.02)
    step("LoRA adapter: first set (adapter inputs) + generate",
         lambda: (m.set_adapter(ad), m.generate(prompt, max_tokens=4)))
    step("LoRA swap to the base model and back + generate", lambda: (m.set_adapter(None), m.set_adapter(ad),
                                                                     m.generate(prompt, max_tokens=4)))
    step("chat (ChatML template)", lambda: m.chat([{"role": "user", "content": "Tell me about a fox."}], max_tokens=8))
    model_compiles = m.engine.compiles
    print(repr(m))
    m.release()
    draft.release()
    for q in ("int8", "lut4", "int4"):
        mq = load(path, device="sim", quantize=q)
        step(f"generate 8 tokens, {q} weights (another Model)", lambda: mq.generate(prompt, max_tokens=8))
        mq.release()
    mw = load(path, device="sim", quantize="int8", activations="int8", calibration=prompt * 4)
    step("generate 8 tokens, W8A8 (another Model: baked layers)", lambda: mw.generate(prompt, max_tokens=8))
    mw.release()
    print(f"the fp16 model alone: {model_compiles} compiles (target <= 60); the process: {used()} of 119")
    data = os.path.join(work, "data.txt")
    with open(data, "w") as fh:
        fh.write((prompt + ". He wanted to share it with his friend Sam, so he ran to the park.\n") * 200)
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "orion.cli", "train", "--model", path, "--lora", "r=8,alpha=16", "--data", data,
           "--steps", "2", "--batch", "1", "--seq-len", "64", "--no-progress", "--sample-tokens", "0",
           "--ckpt-dir", os.path.join(work, "lora-run")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(f"orion train --model M --lora r=8,alpha=16 (2 steps, seq 64): rc {r.returncode}, "
          f"{time.perf_counter() - t:.1f} s")
    print("\n".join(line for line in r.stdout.splitlines() if "compiles" in line or "loss" in line)[-1500:])
    if r.returncode:
        print(r.stderr[-2000:])
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if model_compiles <= 60 and r.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
