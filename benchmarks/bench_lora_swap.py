"""LoRA adapter swap: ``model.set_adapter`` (A/B are program inputs: surface writes) vs what a baked-weight
design pays per swap (merge the adapter into W on the host, compile every stage program again), in one run.

Random Llama weights of a chosen size (default: stories15M's shapes with a 512-token vocabulary), adapters
on q and v (rank 8) — the PEFT default recipe. Both variants prepare the same program sets (a prefill
bucket and the decode set); the decode speed with the adapter slots is printed next to the base model's,
the cost of carrying adapter inputs.

    PYTHONPATH=python:BUILD python benchmarks/bench_lora_swap.py [--dim 288] [--layers 6] [--swaps 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

import orion  # noqa: E402
from orion import lora as L  # noqa: E402
from orion.models import LlamaConfig, Model  # noqa: E402
from orion.models.testing import random_weights  # noqa: E402


def decode_tok_s(m, prompt, n, repeats=3):
    m.generate(prompt, max_tokens=n)                          # compiles, warms the caches
    return max(m.generate(prompt, max_tokens=n).decode_tok_s for _ in range(repeats))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=288)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--targets", default="q,v")
    ap.add_argument("--swaps", type=int, default=20)
    ap.add_argument("--device", default="sim")
    a = ap.parse_args()
    orion.sim.set_compile_budget(10**6)
    cfg = LlamaConfig(vocab_size=a.vocab, n_ctx=256, d_model=a.dim, n_layers=a.layers, n_heads=a.heads,
                      n_kv_heads=a.heads, d_ff=a.hidden)
    w = {k: v.astype(np.float16) for k, v in random_weights(cfg, seed=0).items()}
    adapters = [L.init_adapter(cfg, L.LoraConfig(r=a.rank, alpha=2 * a.rank, targets=a.targets), seed=i, b_std=0.02)
                for i in range(2)]
    prompt, n = list(range(1, 25)), 24

    base = Model(cfg, w, device=a.device, stop_tokens=[])
    base_tok_s = decode_tok_s(base, prompt, n)
    base.release()

    m = Model(cfg, w, device=a.device, stop_tokens=[])
    m.set_adapter(adapters[0])
    slots_tok_s = decode_tok_s(m, prompt, n)                 # compiles the sets with adapter inputs once
    n_progs = sum(len(s) for s in m.engine.sets.values())
    c0 = orion.counters()
    times = []
    for i in range(a.swaps):
        t = time.perf_counter()
        m.set_adapter(adapters[(i + 1) % 2])
        times.append(time.perf_counter() - t)
    c1 = orion.counters()
    m.release()

    t = time.perf_counter()                                   # the baked alternative: merge + recompile
    mm = Model(cfg, L.merge(w, adapters[1]), device=a.device, stop_tokens=[])
    mm.engine.prepare(len(prompt), len(prompt) + n)
    rebuild_s = time.perf_counter() - t
    mm.release()

    swap_ms = 1e3 * float(np.median(times))
    print(f"Llama d={a.dim} L={a.layers} h={a.hidden}, LoRA r={a.rank} on {a.targets} "
          f"({len(adapters[0].names)} linears), {n_progs} stage programs in 2 sets, device {a.device}")
    print(f"  set_adapter swap (ours):   {swap_ms:8.2f} ms median of {a.swaps}; compiles "
          f"{c1['compiles'] - c0['compiles']}, loads {c1['loads'] - c0['loads']}, surface writes "
          f"{(c1['weight_writes'] - c0['weight_writes']) // a.swaps} per swap")
    print(f"  merge + recompile (baked): {rebuild_s * 1e3:8.2f} ms ({n_progs} compiles)  -> "
          f"{rebuild_s * 1e3 / swap_ms:.0f}x")
    print(f"  decode: base {base_tok_s:.1f} tok/s, with adapter inputs {slots_tok_s:.1f} tok/s")


if __name__ == "__main__":
    main()
