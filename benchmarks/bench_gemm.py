"""GEMM throughput: orion's fp16-storage simulator GEMM vs numpy float32 matmul (OpenBLAS).

    PYTHONPATH=python:BUILD python benchmarks/bench_gemm.py [--reps 15] [--rounds 3] [--threads N]

numpy runs in a subprocess with OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE removed from its environment, so
OpenBLAS picks its best kernel for this CPU; the kernel name and thread count come from threadpoolctl.
Ours and numpy alternate for --rounds rounds (the machine is shared and noisy); each figure is the
median over all repetitions of all rounds, and the ratio compares numbers from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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

NUMPY_CHILD = r"""
import json, sys, time
import numpy as np
shapes, reps = json.loads(sys.argv[1]), int(sys.argv[2])
info = {}
try:
    from threadpoolctl import threadpool_info
    blas = [d for d in threadpool_info() if d.get("user_api") == "blas"]
    if blas:
        info = {k: blas[0].get(k) for k in ("internal_api", "architecture", "num_threads", "version")}
except ImportError:
    info = {"architecture": "? (pip install threadpoolctl)"}
rng = np.random.default_rng(0)
times = []
for name, batch, m, k, n in shapes:
    a = rng.standard_normal((batch, m, k)).astype(np.float32).squeeze(0) if batch == 1 else \
        rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32).squeeze(0) if batch == 1 else \
        rng.standard_normal((batch, k, n)).astype(np.float32)
    out = np.matmul(a, b)
    for _ in range(2):
        np.matmul(a, b, out=out)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); np.matmul(a, b, out=out); ts.append(time.perf_counter() - t0)
    times.append(ts)
print(json.dumps({"info": info, "times": times}))
"""


def run_numpy(reps: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env.pop("PYTHONPATH", None)
    out = subprocess.run([sys.executable, "-c", NUMPY_CHILD, json.dumps(SHAPES), str(reps)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def run_ours(native, reps: int) -> list[list[float]]:
    rng = np.random.default_rng(0)
    times = []
    for _name, batch, m, k, n in SHAPES:
        shape_a = (m, k) if batch == 1 else (batch, m, k)
        shape_b = (k, n) if batch == 1 else (batch, k, n)
        a = rng.standard_normal(shape_a).astype(np.float16)
        b = rng.standard_normal(shape_b).astype(np.float16)
        for _ in range(2):
            native._k_gemm(a, b)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            native._k_gemm(a, b)
            ts.append(time.perf_counter() - t0)
        times.append(ts)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="orion pool size (0: default)")
    ap.add_argument("--isa", default="", help="force an orion ISA (scalar/avx2/avx512)")
    args = ap.parse_args()

    from orion import _native as native

    if args.threads:
        native._k_set_threads(args.threads)
    if args.isa and not native._k_force_isa(args.isa):
        print(f"ISA {args.isa} not supported here", file=sys.stderr)
        return 2

    ours = [[] for _ in SHAPES]
    theirs = [[] for _ in SHAPES]
    info = {}
    for _ in range(args.rounds):
        for i, ts in enumerate(run_ours(native, args.reps)):
            ours[i] += ts
        res = run_numpy(args.reps)
        info = res["info"]
        for i, ts in enumerate(res["times"]):
            theirs[i] += ts

    print(f"orion: isa={native._k_isa()} threads={native._k_num_threads()} (fp16 storage, fp32 accumulate)")
    print(f"numpy {np.__version__}: {info.get('internal_api')} {info.get('version')} "
          f"kernel={info.get('architecture')} threads={info.get('num_threads')} (float32)")
    print(f"median of {args.rounds}x{args.reps} runs each")
    print(f"{'shape':34s} {'orion GF/s':>10s} {'numpy GF/s':>10s} {'ratio':>6s}")
    worst = float("inf")
    for i, (name, batch, m, k, n) in enumerate(SHAPES):
        flops = 2.0 * batch * m * k * n
        g_ours = flops / statistics.median(ours[i]) / 1e9
        g_np = flops / statistics.median(theirs[i]) / 1e9
        worst = min(worst, g_ours / g_np)
        print(f"{name:34s} {g_ours:10.1f} {g_np:10.1f} {g_ours / g_np:6.2f}")
    print(f"worst ratio {worst:.2f} (target >= 0.80)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
