"""GEMM throughput: orion's fp16-storage simulator GEMM vs numpy float32 matmul (OpenBLAS), alternating in
blocks per shape (``benchmarks/bench_gemm.py`` prints the RESULTS.md tables from the same samples).

numpy runs in a subprocess without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE, so OpenBLAS picks its best kernel;
a pause before each block lets OpenBLAS's spinning threads go to sleep. The gated number per shape is the
best-time ratio (what each kernel does when it gets the cores)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

# name, batch, M, K, N  (C[M,N] = A[M,K] @ B[K,N])
SHAPES = [
    ("conv1x1 W[3072,768]@X[768,256]", 1, 3072, 768, 256),
    ("conv1x1 W[768,3072]@X[3072,256]", 1, 768, 3072, 256),
    ("attn 12x[256x64]@[64x256]", 12, 256, 64, 256),
    ("attn 12x[256x256]@[256x64]", 12, 256, 256, 64),
]
QUICK_SHAPES = [("quick W[256,256]@X[256,64]", 1, 256, 256, 64)]

# Persistent numpy worker: reads a shape index per line, runs that matmul once, answers the time.
NUMPY_CHILD = r"""
import json, sys, time
import numpy as np
shapes, cpu_time = json.loads(sys.argv[1]), sys.argv[2] == "1"
clock = time.thread_time if cpu_time else time.perf_counter
info = {}
try:
    from threadpoolctl import threadpool_info, threadpool_limits
    if cpu_time:
        threadpool_limits(1)
    blas = [d for d in threadpool_info() if d.get("user_api") == "blas"]
    if blas:
        info = {k: blas[0].get(k) for k in ("internal_api", "architecture", "num_threads", "version")}
except ImportError:
    info = {"architecture": "? (pip install threadpoolctl)"}
rng = np.random.default_rng(0)
ops = []
for name, batch, m, k, n in shapes:
    lead = () if batch == 1 else (batch,)
    a = rng.standard_normal(lead + (m, k)).astype(np.float32)
    b = rng.standard_normal(lead + (k, n)).astype(np.float32)
    out = np.matmul(a, b)
    ops.append((a, b, out))
print(json.dumps(info), flush=True)
for line in sys.stdin:
    a, b, out = ops[int(line)]
    t0 = clock(); np.matmul(a, b, out=out); dt = clock() - t0
    print(dt, flush=True)
"""


class NumpyWorker:
    """numpy in a subprocess without the OpenBLAS kernel/cache overrides of this workplace."""

    def __init__(self, shapes, cpu_time: bool):
        env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
        env.pop("PYTHONPATH", None)
        self.p = subprocess.Popen([sys.executable, "-c", NUMPY_CHILD, json.dumps(shapes), str(int(cpu_time))], env=env,
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.info = json.loads(self.p.stdout.readline())

    def run(self, i: int) -> float:
        self.p.stdin.write(f"{i}\n")
        self.p.stdin.flush()
        return float(self.p.stdout.readline())

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def orion_ops(shapes):
    rng = np.random.default_rng(0)
    ops = []
    for _name, batch, m, k, n in shapes:
        lead = () if batch == 1 else (batch,)
        ops.append((rng.standard_normal(lead + (m, k)).astype(np.float16),
                    rng.standard_normal(lead + (k, n)).astype(np.float16)))
    return ops


def time_orion(native, a, b, clock) -> float:
    t0 = clock()
    native.gemm_f16(a, b)
    return clock() - t0


def sample(native, shapes, rounds: int, reps: int, cpu_time: bool, threads: int = 0, pause: float = 0.3):
    """Times per shape for both sides: (ours, theirs, numpy's BLAS info), ``rounds`` x ``reps`` each.
    Alternating blocks per shape (ours, numpy, ours, ...) so both sides see the same machine load; not
    finer than blocks: OpenBLAS's worker threads busy-wait after each call and would steal the cores."""
    native.set_num_threads(1 if cpu_time else threads)   # 0: the default pool size
    clock = time.thread_time if cpu_time else time.perf_counter
    ours = [[] for _ in shapes]
    theirs = [[] for _ in shapes]
    worker = NumpyWorker(shapes, cpu_time)
    ops = orion_ops(shapes)
    try:
        for i in range(len(shapes)):  # warm-up (buffers, pools, page faults)
            for _ in range(2):
                time_orion(native, *ops[i], clock)
                worker.run(i)
        for _ in range(rounds):
            for i in range(len(shapes)):
                time.sleep(pause)
                ours[i] += [time_orion(native, *ops[i], clock) for _ in range(reps)]
                time.sleep(pause)
                theirs[i] += [worker.run(i) for _ in range(reps)]
    finally:
        worker.close()
    return ours, theirs, worker.info


def run(quick: bool = False, use_torch: bool = True) -> dict:
    """The ``gemm`` section of an ``orion bench`` result (wall time, default threads)."""
    from .. import _native as native
    from . import metric
    shapes = QUICK_SHAPES if quick else SHAPES
    rounds, reps = (2, 3) if quick else (6, 10)
    ours, theirs, info = sample(native, shapes, rounds, reps, cpu_time=False, pause=0.05 if quick else 0.3)
    metrics = {}
    for (name, batch, m, k, n), o, t in zip(shapes, ours, theirs):
        flops = 2.0 * batch * m * k * n
        key = f"{batch}x{m}x{k}x{n}"
        # samples: the best of each round (the round-to-round spread of the gated best-time number)
        go = [flops / min(o[r * reps:(r + 1) * reps]) / 1e9 for r in range(rounds)]
        gt = [flops / min(t[r * reps:(r + 1) * reps]) / 1e9 for r in range(rounds)]
        metrics[f"orion_gflops_{key}"] = metric(max(go), "GFLOP/s (best)", "higher", go)
        metrics[f"numpy_gflops_{key}"] = metric(max(gt), "GFLOP/s (best)", "higher", gt)
        metrics[f"ratio_vs_numpy_{key}"] = metric(max(go) / max(gt), "x (best time)", "higher",
                                                  spread=metrics[f"orion_gflops_{key}"]["spread"]
                                                  + metrics[f"numpy_gflops_{key}"]["spread"])
    return {"params": {"shapes": [list(s) for s in shapes], "rounds": rounds, "reps": reps,
                       "orion_isa": native.kernel_isa(), "orion_threads": native.num_threads(), "numpy_blas": info},
            "notes": ["GFLOP/s from the best time over all repetitions (samples: the best of each round); "
                      "ratio = orion / numpy float32"],
            "metrics": metrics}
