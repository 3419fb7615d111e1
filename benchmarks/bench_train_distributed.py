#!/usr/bin/env python3
"""Data-parallel training steps of a Stories110M-shaped Llama (dim 768, 12 layers, hidden 2048, vocab 32000;
seq 256, batch 1 per rank) under MPI: gradient bytes and all-reduce time per step, and how much of it the
per-layer buckets hide behind the backward.

    mpiexec -n 2 env PYTHONPATH=python:BUILD python benchmarks/bench_train_distributed.py [--steps 3]
    PYTHONPATH=python:BUILD python benchmarks/bench_train_distributed.py --accum 2     # the same step, one process

Rank 0 prints one JSON object: per measured step the wall time, the exposed communication (the main
thread waiting for reductions + the small control exchange: ``t_comm``) and the communication thread's
busy time; the bytes each rank sends per step; and the same buckets reduced back to back with nothing
else running (the pure all-reduce time for these bytes on this machine). A rank that finishes its
backward first also waits for the slower one: ``hidden_vs_*`` use, per step, the least-waiting rank
(the exposed communication proper); ``per_rank_t_comm`` shows the imbalance.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--accum", type=int, default=1, help="sequences per rank per step")
    a = ap.parse_args()

    from orion.train.distributed import from_env
    from orion.train.data import TokenDataset
    from orion.train.model import PRESETS, init_params, n_params, resized
    from orion.train.trainer import TrainConfig, Trainer, blas_threads, default_blas_threads

    dist = from_env(a.timeout)
    size = dist.size if dist is not None else 1
    cfg = PRESETS["stories110M"]
    if a.layers:
        cfg = resized(cfg, n_layers=a.layers)
    params = init_params(cfg, 0)
    toks = np.random.default_rng(0).integers(0, cfg.vocab_size, 64 * (a.seq + 1)).astype(np.uint16)
    data = TokenDataset(toks, a.seq, cfg.vocab_size, val_fraction=0.0, seed=0)
    tc = TrainConfig(steps=a.steps + 1, batch=1, accum=a.accum * size, seq_len=a.seq, warmup=1, eval_interval=0)
    t = time.perf_counter()
    tr = Trainer(cfg, tc, params, data, dist=dist)
    setup = time.perf_counter() - t
    red = tr.grads.reducer
    if red is None:                                   # one process: step times only
        with blas_threads(default_blas_threads(cfg)):
            times = [tr.train_step() for _ in range(a.steps + 1)][1:]
        print(json.dumps({"ranks": 1, "accum": tc.accum, "seq": a.seq, "median_step": {
            k: float(np.median([getattr(r, k) for r in times])) for k in ("t_total", "t_device", "t_cpu", "t_optim",
                                                                           "t_update")}}, indent=1))
        return
    steps = []
    with blas_threads(default_blas_threads(cfg)):
        for i in range(a.steps + 1):                  # the first step warms up (buffers, surfaces)
            b0, s0 = red.bytes_sent, red.busy_s
            rec = tr.train_step()
            if i:
                steps.append({"t_total": rec.t_total, "t_device": rec.t_device, "t_cpu": rec.t_cpu,
                              "t_optim": rec.t_optim, "t_update": rec.t_update, "t_comm": rec.t_comm,
                              "comm_busy": red.busy_s - s0, "bytes_sent": red.bytes_sent - b0})
    # the same buckets back to back, nothing else running: the pure all-reduce time for these bytes
    pure = []
    for _ in range(3):
        dist.barrier()
        t = time.perf_counter()
        for i in range(len(red.flats)):
            red.submit(i)
        red.wait()
        pure.append(time.perf_counter() - t)
    red.take_wait()
    tr.close()
    ranks = dist.allgather(steps)
    if dist.is_root:
        med = {k: float(np.median([s[k] for s in steps])) for k in steps[0]}
        # the rank that finished its backward last waits least: its wait is the communication the overlap
        # did not hide; the other ranks' extra wait is load imbalance between them
        last = [min(r[i]["t_comm"] for r in ranks) for i in range(len(steps))]
        busy = [min(r[i]["comm_busy"] for r in ranks) for i in range(len(steps))]
        grad_bytes = sum(f.nbytes for f in red.flats)
        print(json.dumps({
            "ranks": dist.size, "params": n_params(cfg), "seq": a.seq, "layers": cfg.n_layers,
            "gradient_bytes": grad_bytes, "buckets": len(red.flats),
            "last_bucket_bytes": int(red.flats[-1].nbytes), "setup_s": setup,
            "median_step": med, "rank0_overlap": 1.0 - med["t_comm"] / med["comm_busy"] if med["comm_busy"] else None,
            "exposed_slowest_rank": last, "busy_slowest_rank": busy,
            # share of the communication the backward hid: against the same reduction run alone, and against
            # the communication thread's time inside the step (longer: it shares the cores with the backward)
            "hidden_vs_pure": 1.0 - float(np.median(last)) / min(pure),
            "hidden_vs_busy": 1.0 - float(np.median(last)) / float(np.median(busy)),
            "per_rank_t_comm": [[round(x["t_comm"], 3) for x in r] for r in ranks],
            "pure_allreduce_s": sorted(pure), "pure_GBps_sent": med["bytes_sent"] / min(pure) / 1e9,
            "steps": steps}, indent=1))
    dist.finish(0)


if __name__ == "__main__":
    main()
