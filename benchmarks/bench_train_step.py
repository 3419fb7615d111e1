#!/usr/bin/env python3
"""One training step of a Stories110M-shaped Llama (dim 768, 12 layers, 12 heads, hidden 2048, vocab
32000, seq 256): one 256-token microbatch, forward + backward + AdamW, on orion (device programs on the
simulator or the ANE, the rest on the CPU) vs PyTorch CPU in the same run, the sides interleaved in rounds
(one step of each per round; medians of the rounds after a warm-up round):

- ``torch``: a hand-written PyTorch fp32 Llama (autograd, AdamW);
- ``hf fp32`` / ``hf bf16``: transformers' ``LlamaForCausalLM`` of the same config (random init), fp32 and
  under ``torch.autocast("cpu", dtype=torch.bfloat16)``.

Reports the ratios, our step split (device eval / CPU / weight update / optimizer), the weight-update cost
per strategy (dynamic: surface staging; recompile: the 48 per-layer recompiles), compiles/loads per step,
and with ``--profile`` the simulated steps of our last step by op and the slowest steps (orion.sim.timing).
PyTorch and transformers are benchmark-only dependencies.

    PYTHONPATH=python:BUILD python benchmarks/bench_train_step.py [--steps 3] [--layers 12] [--no-torch]
        [--no-hf] [--profile]
"""

from __future__ import annotations

import argparse
import json
import math
import os

from orion.bench.train_step import SIDES, interleaved_step_times, med, recompile_update_cost, setup
from orion.train.model import n_params

LABELS = {"torch": "torch fp32 (hand-written)", "hf_fp32": "transformers fp32", "hf_bf16": "transformers bf16 autocast"}
TARGETS = {"hf_fp32": "target <= 0.7x", "hf_bf16": "target <= 1.0x"}


def print_profile(tm, top: int = 12) -> None:
    total = tm.seconds
    print(f"\nsimulated steps of our last step (orion.sim.timing): {total:.3f} s in "
          f"{sum(r['calls'] for r in tm.rows)} step calls")
    print(tm.table(top=top))
    print(f"\nslowest {top} steps (summed over the programs' calls):")
    print(f"{'op':<18}{'step':<34}{'calls':>6}{'ms':>9}{'share':>7}{'GFLOP/s':>9}{'GB/s':>7}")
    for r in sorted(tm.rows, key=lambda r: -r["seconds"])[:top]:
        s = r["seconds"] or 1e-12
        print(f"{r['op']:<18}{r['step'][:33]:<34}{r['calls']:>6}{r['seconds'] * 1e3:>9.2f}{r['seconds'] / total:>7.1%}"
              f"{r['flops'] / s / 1e9:>9.1f}{r['bytes'] / s / 1e9:>7.1f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3, help="timed rounds (after one warm-up round)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--no-torch", action="store_true", help="orion only")
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers sides")
    ap.add_argument("--no-recompile", action="store_true", help="skip the recompile-strategy update measurement")
    ap.add_argument("--profile", action="store_true", help="time our last step's simulated steps by op")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="numpy BLAS threads for our CPU part (default: the trainer's choice)")
    ap.add_argument("--torch-threads", type=int, default=None,
                    help="torch threads (default: ours, ORION_NUM_THREADS or the core count)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    cfg, params, tokens = setup("stories110M", args.layers, args.seq)
    print(f"Stories110M-shaped: d={cfg.d_model} L={cfg.n_layers} H={cfg.n_heads} hidden={cfg.d_ff} "
          f"V={cfg.vocab_size} S={args.seq}, {n_params(cfg) / 1e6:.1f}M params; one {args.seq}-token microbatch "
          f"(fwd + bwd + AdamW); load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    sides = ("orion",) if args.no_torch else tuple(s for s in SIDES if not (args.no_hf and s.startswith("hf")))
    threads = args.torch_threads or int(os.environ.get("ORION_NUM_THREADS", "0")) or os.cpu_count()
    profile = [] if args.profile else None
    try:
        steps, info = interleaved_step_times(cfg, params, tokens, args.steps, sides, args.blas_threads, threads,
                                             profile)
    except ImportError as e:
        print(f"{e}: pip install torch transformers (benchmark-only), or --no-torch")
        return 1
    ours = steps["orion"]
    result = {"config": cfg.to_dict(), "seq": args.seq, **info,
              "sides": {k: {"steps": v, "total": med(v, "total")} for k, v in steps.items()}}
    o = {k: med(ours, k) for k in ("total", "device", "cpu", "weights", "optim")}
    result["sides"]["orion"].update(o)
    if not args.no_recompile:
        upd, nc, nl = recompile_update_cost(cfg, params, args.seq)
        result["recompile_update"] = {"seconds": upd, "compiles": nc, "loads": nl}
    print()
    print(f"orion ({info['device']}, dynamic): {o['total']:.2f} s/step  [device eval {o['device']:.2f} | CPU "
          f"{o['cpu']:.2f} | weight update {o['weights']:.3f} | AdamW {o['optim']:.2f}]  compiles/step "
          f"{ours[-1]['compiles']}, loads/step {ours[-1]['loads']}; one-time compile {info['compile_s']:.2f} s")
    if "recompile_update" in result:
        r = result["recompile_update"]
        print(f"weight update per step: dynamic {o['weights']:.3f} s (surface staging, 0 compiles) | recompile "
              f"{r['seconds']:.2f} s ({r['compiles']} compiles, {r['loads']} loads) | delta: not verified here")
    best_o = min(r["total"] for r in ours if not r["warmup"])
    ratios = {}
    for side in sides[1:]:
        st = steps[side]
        t = {k: med(st, k) for k in ("total", "forward", "backward", "optim")}
        best_t = min(r["total"] for r in st if not r["warmup"])
        ratios[side] = o["total"] / t["total"]
        print(f"{LABELS[side]} ({info['torch_threads']} threads): {t['total']:.2f} s/step  [fwd {t['forward']:.2f} | "
              f"bwd {t['backward']:.2f} | clip+AdamW {t['optim']:.2f}]  ratio orion/it {ratios[side]:.2f}x median, "
              f"{best_o / best_t:.2f}x best-of  ({TARGETS.get(side, 'reference')})")
    result["ratios"] = ratios
    if "torch" in steps:
        print("loss per step (same init, data, AdamW): orion " + " ".join(f"{r['loss']:.4f}" for r in ours) +
              " | torch " + " ".join(f"{r['loss']:.4f}" for r in steps["torch"]) +
              f" (ln V = {math.log(cfg.vocab_size):.4f})")
    if profile:
        print_profile(profile[0])
        result["profile"] = {"by_op": profile[0].by_op(), "rows": profile[0].rows}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
