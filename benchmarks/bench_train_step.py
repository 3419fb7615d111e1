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
import time

import numpy as np


def our_step_times(cfg, params, tokens, steps: int, strategy: str, blas_threads):
    import orion
    from orion.train.optim import AdamW, global_norm
    from orion.train.programs import LayerPrograms
    from orion.train.step import GradAccumulator, StepEngine, zero_grads
    from orion.train.trainer import blas_threads as limit, default_blas_threads
    blas_threads = blas_threads or default_blas_threads(cfg)

    t = time.perf_counter()
    progs = LayerPrograms(cfg, tokens.shape[1] - 1, params, strategy, "auto")
    compile_s = time.perf_counter() - t
    eng = StepEngine(cfg, progs, params)
    opt = AdamW(params)
    grads = GradAccumulator(zero_grads(params))
    X, Y = tokens[:, :-1], tokens[:, 1:]
    out = []
    with limit(blas_threads):
        for i in range(steps + 1):
            c0 = orion.counters()
            s0 = dict(progs.stats)
            t0 = time.perf_counter()
            grads.start()
            res = eng.microbatch(X, Y, grads, 256.0 / X.size)
            grads.finish()
            t1 = time.perf_counter()
            gn = global_norm(grads) / 256.0
            mul = (1 / 256.0) * min(1.0, 1.0 / (gn + 1e-6))
            t2 = time.perf_counter()
            opt.step(params, grads, 3e-4, grad_mul=mul)
            t3 = time.perf_counter()
            progs.update(params)
            t4 = time.perf_counter()
            c1 = orion.counters()
            s1 = progs.stats
            dev = s1["eval_s"] - s0["eval_s"]
            stage = s1["stage_s"] - s0["stage_s"]
            rec = dict(total=t4 - t0, device=dev, weights=stage + (t4 - t3), cpu=(t1 - t0) - dev - stage + (t2 - t1),
                       optim=t3 - t2, loss=res.loss_sum / res.n_tokens, finite=res.finite,
                       compiles=c1["compiles"] - c0["compiles"], loads=c1["loads"] - c0["loads"])
            rec["warmup"] = i == 0
            out.append(rec)
            print(f"  orion {strategy} step {i}{' (warmup)' if i == 0 else ''}: {rec['total']:.2f}s "
                  f"loss {rec['loss']:.4f}", flush=True)
    device = progs.device
    progs.release()
    return compile_s, out, device


def recompile_update_cost(cfg, params, seq):
    """Seconds for one weight update under the recompile strategy (4 programs per layer)."""
    import orion
    from orion.train.programs import LayerPrograms
    progs = LayerPrograms(cfg, seq, params, "recompile", "auto")
    c0 = orion.counters()
    t = time.perf_counter()
    progs.update(params)
    dt = time.perf_counter() - t
    c1 = orion.counters()
    progs.release()
    return dt, c1["compiles"] - c0["compiles"], c1["loads"] - c0["loads"]


def torch_step_times(cfg, params, tokens, steps: int):
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    P = {k: torch.nn.Parameter(torch.from_numpy(v.copy())) for k, v in params.items()}
    decay = [p for k, p in P.items() if p.ndim >= 2]
    nodecay = [p for k, p in P.items() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    S = tokens.shape[1] - 1
    hd = cfg.head_dim
    freq = cfg.rope_theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(S, dtype=torch.float64)[:, None] * freq[None]
    cos, sin = torch.cos(ang).float(), torch.sin(ang).float()
    x_in = torch.from_numpy(tokens[:, :-1])
    y = torch.from_numpy(tokens[:, 1:])

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.norm_eps) * w

    def rope(x, heads):                    # x [B, S, heads*hd], adjacent pairs
        B = x.shape[0]
        xr = x.view(B, S, heads, hd // 2, 2)
        x0, x1 = xr[..., 0], xr[..., 1]
        c, s = cos[None, :, None, :], sin[None, :, None, :]
        return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], -1).view(B, S, heads * hd)

    def loss_fn():
        x = P["tok_emb"][x_in]
        B = x.shape[0]
        for i in range(cfg.n_layers):
            p = f"layers.{i}."
            h = rms(x, P[p + "rms_att"])
            q = rope(h @ P[p + "wq"].T, cfg.n_heads).view(B, S, cfg.n_heads, hd).transpose(1, 2)
            k = rope(h @ P[p + "wk"].T, cfg.n_kv_heads).view(B, S, cfg.n_kv_heads, hd).transpose(1, 2)
            v = (h @ P[p + "wv"].T).view(B, S, cfg.n_kv_heads, hd).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + a.transpose(1, 2).reshape(B, S, cfg.dim) @ P[p + "wo"].T
            h = rms(x, P[p + "rms_ffn"])
            x = x + (F.silu(h @ P[p + "w1"].T) * (h @ P[p + "w3"].T)) @ P[p + "w2"].T
        logits = rms(x, P["rms_final"]) @ P.get("wcls", P["tok_emb"]).T
        return F.cross_entropy(logits.view(-1, cfg.vocab_size), y.reshape(-1))

    out = []
    for i in range(steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn()
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(list(P.values()), 1.0)
        opt.step()
        t3 = time.perf_counter()
        rec = dict(total=t3 - t0, forward=t1 - t0, backward=t2 - t1, optim=t3 - t2, loss=float(loss.detach()))
        rec["warmup"] = i == 0
        out.append(rec)
        print(f"  torch step {i}{' (warmup)' if i == 0 else ''}: {rec['total']:.2f}s loss {rec['loss']:.4f}",
              flush=True)
    return out, torch.get_num_threads()


def med(xs, k):
    return float(np.median([x[k] for x in xs if not x["warmup"]]))


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

    from orion.train.model import PRESETS, init_params
    import dataclasses
    cfg = dataclasses.replace(PRESETS["stories110M"], n_layers=args.layers, seq_len=max(args.seq, 256))
    params = init_params(cfg, 0)
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, args.seq + 1))
    print(f"Stories110M-shaped: d={cfg.dim} L={cfg.n_layers} H={cfg.n_heads} hidden={cfg.hidden_dim} "
          f"V={cfg.vocab_size} S={args.seq}, {cfg.n_params() / 1e6:.1f}M params; one {args.seq}-token microbatch "
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
