#!/usr/bin/env python3
"""One training step of a Stories110M-shaped Llama (dim 768, 12 layers, 12 heads, hidden 2048, vocab
32000, seq 256): one 256-token microbatch, forward + backward + AdamW, on orion (device programs on the
simulator or the ANE, the rest on the CPU) vs PyTorch CPU fp32 with AdamW, in the same run.

Reports ours vs torch step time, our step split (device eval / CPU / weight update / optimizer), the
weight-update cost per strategy (dynamic: surface staging; recompile: the 48 per-layer recompiles),
and compiles/loads per step. PyTorch is a benchmark-only dependency (``pip install torch``).

    PYTHONPATH=python:BUILD python benchmarks/bench_train_step.py [--steps 3] [--layers 12] [--no-torch]
"""

from __future__ import annotations

import argparse
import json
import math

from orion.bench.train_step import med, our_step_times, recompile_update_cost, setup, torch_step_times
from orion.train.model import n_params


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3, help="timed steps (after one warmup step)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-recompile", action="store_true", help="skip the recompile-strategy update measurement")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="numpy BLAS threads for our CPU part (default: the trainer's choice)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    cfg, params, tokens = setup("stories110M", args.layers, args.seq)
    print(f"Stories110M-shaped: d={cfg.d_model} L={cfg.n_layers} H={cfg.n_heads} hidden={cfg.d_ff} "
          f"V={cfg.vocab_size} S={args.seq}, {n_params(cfg) / 1e6:.1f}M params; one {args.seq}-token microbatch "
          f"(fwd + bwd + AdamW)", flush=True)
    result = {"config": cfg.to_dict(), "seq": args.seq}
    compile_s, ours, device = our_step_times(cfg, {k: v.copy() for k, v in params.items()}, tokens, args.steps,
                                             "dynamic", args.blas_threads)
    result["orion"] = {"device": device, "strategy": "dynamic", "compile_s": compile_s, "steps": ours,
                       **{k: med(ours, k) for k in ("total", "device", "cpu", "weights", "optim")}}
    if not args.no_recompile:
        upd, nc, nl = recompile_update_cost(cfg, params, args.seq)
        result["recompile_update"] = {"seconds": upd, "compiles": nc, "loads": nl}
    if not args.no_torch:
        try:
            tsteps, nthreads = torch_step_times(cfg, params, tokens, args.steps)
            result["torch"] = {"threads": nthreads, "steps": tsteps,
                               **{k: med(tsteps, k) for k in ("total", "forward", "backward", "optim")}}
        except ImportError:
            print("PyTorch not installed: pip install torch (benchmark-only)")
    o = result["orion"]
    print()
    print(f"orion ({device}, dynamic): {o['total']:.2f} s/step  [device eval {o['device']:.2f} | CPU {o['cpu']:.2f} | "
          f"weight update {o['weights']:.3f} | AdamW {o['optim']:.2f}]  compiles/step "
          f"{ours[-1]['compiles']}, loads/step {ours[-1]['loads']}; one-time compile {compile_s:.2f} s")
    if "recompile_update" in result:
        r = result["recompile_update"]
        print(f"weight update per step: dynamic {o['weights']:.3f} s (surface staging, 0 compiles) | recompile "
              f"{r['seconds']:.2f} s ({r['compiles']} compiles, {r['loads']} loads) | delta: not verified here")
    if "torch" in result:
        t = result["torch"]
        print(f"torch CPU fp32 ({t['threads']} threads): {t['total']:.2f} s/step  [fwd {t['forward']:.2f} | bwd "
              f"{t['backward']:.2f} | clip+AdamW {t['optim']:.2f}]")
        best_o = min(r["total"] for r in ours if not r["warmup"])
        best_t = min(r["total"] for r in t["steps"] if not r["warmup"])
        print(f"ratio orion/torch: {o['total'] / t['total']:.2f}x median, {best_o / best_t:.2f}x best-of "
              f"({best_o:.2f} s vs {best_t:.2f} s)  (target <= 1.0x)")
        print("loss per step (same init, data, AdamW): orion " + " ".join(f"{r['loss']:.4f}" for r in ours) +
              " | torch " + " ".join(f"{r['loss']:.4f}" for r in t["steps"]) +
              f" (ln V = {math.log(cfg.vocab_size):.4f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
