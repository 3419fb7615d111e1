"""GPT-2 124M-shaped decode and prefill: orion programs on the simulator (or the ANE) vs PyTorch CPU
fp32 with a KV cache, side by side in one run (target: decode >= 2x PyTorch).

Random weights (the shapes are what matter). Ours: 13 stage programs per (S, T) set, KV cache as
program inputs written in place, classifier on the CPU (fp16 weights, orion's native GEMM, the same
threads) unless --classifier device.
PyTorch: the same weights in fp32, a straightforward GPT-2 forward with a per-layer KV cache, run under
``torch.inference_mode()``, with 1 thread and with torch's default thread count; the speed-up is taken
against the fastest PyTorch row. Compile time is reported separately, never in the timings.

    PYTHONPATH=python:BUILD python benchmarks/bench_decode.py [--prompt 64] [--tokens 32] [--layers 12]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

import orion  # noqa: E402
from orion.native.runtime import DEVICES, resolve_device  # noqa: E402
from orion.models import GPT2Config  # noqa: E402
from orion.models.testing import random_weights  # noqa: E402


from orion.bench.decode import bench_orion, bench_torch  # noqa: E402
from orion.models.engine import Engine  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens (prefill)")
    ap.add_argument("--tokens", type=int, default=32, help="generated tokens per round")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--device", default="auto", choices=DEVICES)
    ap.add_argument("--classifier", default="cpu", choices=["cpu", "device"])
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--live", default="both", choices=["on", "off", "both"],
                    help="dead-column skipping (live_columns hint): on, off (all 16 decode columns computed) or both rows")
    ap.add_argument("--torch-threads", type=int, action="append", default=None,
                    help="PyTorch thread count(s) to measure (repeatable; default: 1 and torch's default - on a "
                         "shared, oversubscribed machine torch's multi-threaded runs collapse, so the speed-up is "
                         "taken against the fastest row)")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    orion.sim.set_compile_budget(10**6)
    cfg = GPT2Config(n_layers=args.layers)
    w32 = random_weights(cfg, seed=0)
    w16 = {k: v.astype(np.float16) for k, v in w32.items()}
    w32h = {k: v.astype(np.float32) for k, v in w16.items()}        # torch gets the same (fp16-representable) values
    prompt = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab_size, args.prompt)]
    print(f"GPT-2 124M-shaped (d={cfg.d_model}, L={cfg.n_layers}, H={cfg.n_heads}, V={cfg.vocab_size}), random "
          f"weights; prompt {args.prompt} tokens, {args.tokens} generated, {args.repeats} rounds; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, simulator threads "
          f"{orion._native.num_threads() if hasattr(orion._native, 'num_threads') else '?'}")
    rows, runs = [], []
    for skip in {"on": [True], "off": [False], "both": [False, True]}[args.live]:
        Engine.skip_dead_columns = skip                      # the default of the engines bench_orion builds
        try:
            ours = bench_orion(cfg, w16, prompt, args.tokens, args.device, args.classifier, args.repeats)
        finally:
            Engine.skip_dead_columns = True
        runs.append(ours)
        rows.append(("orion (" + resolve_device(args.device) + f", classifier {args.classifier}, " +
                     ("live columns)" if skip else "all columns)"), len(prompt) / ours["prefill_s"], 1.0 / ours["step_s"],
                     ours["step_s"] * 1e3))
    if len(runs) == 2:
        assert runs[0]["tokens"] == runs[1]["tokens"], "dead-column skipping changed the greedy tokens"
        print(f"dead-column skipping: decode {runs[0]['step_s'] / runs[1]['step_s']:.2f}x, identical greedy tokens")
    th = None
    if not args.no_torch:
        try:
            import torch  # noqa: F401 - availability check
            for n in args.torch_threads or [1, None]:
                t = bench_torch(cfg, w32h, prompt, args.tokens, args.repeats, n)
                rows.append((f"PyTorch {t['version']} CPU fp32 ({t['threads']} threads, KV cache)",
                             len(prompt) / t["prefill_s"], 1.0 / t["step_s"], t["step_s"] * 1e3))
                if th is None or t["step_s"] < th["step_s"]:
                    th = t                                       # compare with the fastest PyTorch setting
        except ImportError:
            print("(torch not importable: PyTorch column skipped)")
    print(f"\n{'':58s} {'prefill tok/s':>14s} {'decode tok/s':>13s} {'ms/token':>9s}")
    for name, pf, dc, ms in rows:
        print(f"{name:58s} {pf:14.1f} {dc:13.2f} {ms:9.1f}")
    print(f"\norion: {ours['compiles']} programs compiled once in {ours['compile_s']:.1f} s (not in the timings); "
          f"medians over {args.repeats} rounds")
    if th:
        print(f"decode speed-up vs the fastest PyTorch row: {th['step_s'] / ours['step_s']:.2f}x (target >= 2x); prefill: "
              f"{th['prefill_s'] / ours['prefill_s']:.2f}x")
        same = sum(a == b for a, b in zip(ours["tokens"], th["tokens"]))
        print(f"greedy tokens equal to PyTorch's: {same}/{len(th['tokens'])} (fp16 vs fp32)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
