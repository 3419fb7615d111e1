"""GEMM throughput: orion's fp16-storage simulator GEMM vs numpy float32 matmul (OpenBLAS), alternating in
blocks per shape (``benchmarks/bench_gemm.py`` prints the RESULTS.md tables from the same samples).

numpy runs in this process with its BLAS limited (threadpoolctl) to the threads our pool has, so both sides
get the same cores. Each timed sample is a block of back-to-back calls lasting at least ``MIN_BLOCK_S``:
a single small matmul handed to BLAS threads that went to sleep measures their wake-up, not the GEMM (one
such per-call sample once read 0.7 GFLOP/s where the kernel does 200). A pause after each numpy block lets
OpenBLAS's spinning threads go idle before our block. The figures are medians over rounds; the ratio's
samples are per-round ratios of the two sides measured back to back, so machine load cancels in them."""

from __future__ import annotations

import functools
import os
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from .. import _native
from .measure import MIN_BLOCK_S, calls_per_block, figure, repeat, time_cap

# name, batch, M, K, N  (C[M,N] = A[M,K] @ B[K,N])
SHAPES = [
    ("conv1x1 W[3072,768]@X[768,256]", 1, 3072, 768, 256),
    ("conv1x1 W[768,3072]@X[3072,256]", 1, 768, 3072, 256),
    ("attn 12x[256x64]@[64x256]", 12, 256, 64, 256),
    ("attn 12x[256x256]@[256x64]", 12, 256, 256, 64),
]
QUICK_SHAPES = [("quick W[256,256]@X[256,64]", 1, 256, 256, 64)]

PAUSE_S = 0.1            # after a numpy block: OpenBLAS's idle threads spin ~0.1 s before they sleep


def numpy_threads(threads: int):
    """Context: numpy's BLAS limited to ``threads`` (set like our pool's size)."""
    return threadpool_limits(limits=int(threads), user_api="blas")


def blas_info() -> dict:
    """numpy's BLAS as threadpoolctl sees it now (kernel architecture, threads, version)."""
    blas = [d for d in threadpool_info() if d.get("user_api") == "blas"]
    return {k: blas[0].get(k) for k in ("internal_api", "architecture", "num_threads", "version")} if blas else {}


def time_block(fn, calls: int, clock) -> float:
    """Seconds per call of ``fn`` over one block of ``calls`` back-to-back calls."""
    t0 = clock()
    for _ in range(calls):
        fn()
    return (clock() - t0) / calls


class GemmPairs:
    """Per shape, both sides ready to time: our fp16 operands and numpy's float32 ones, with the calls per
    timed block of each side. Use inside :func:`numpy_threads`."""

    def __init__(self, native, shapes, clock, numpy_gemm=np.matmul, min_block_s: float = MIN_BLOCK_S,
                 pause: float = PAUSE_S):
        self.clock, self.pause = clock, pause
        rng = np.random.default_rng(0)
        self.ours, self.theirs, self.calls = [], [], []
        for _name, batch, m, k, n in shapes:
            lead = () if batch == 1 else (batch,)
            a = rng.standard_normal(lead + (m, k)).astype(np.float32)
            b = rng.standard_normal(lead + (k, n)).astype(np.float32)
            a16, b16 = a.astype(np.float16), b.astype(np.float16)
            out = np.matmul(a, b)
            ours = functools.partial(native.gemm_f16, a16, b16)
            theirs = functools.partial(numpy_gemm, a, b, out=out)
            for _ in range(2):            # warm-up: buffers, pools, page faults
                ours()
                theirs()
            self.ours.append(ours)
            self.theirs.append(theirs)
            self.calls.append((calls_per_block(ours, clock, min_block_s), calls_per_block(theirs, clock, min_block_s)))

    def ours_block(self, i: int) -> float:
        return time_block(self.ours[i], self.calls[i][0], self.clock)

    def numpy_block(self, i: int) -> float:
        t = time_block(self.theirs[i], self.calls[i][1], self.clock)
        time.sleep(self.pause)
        return t


def sample(native, shapes, rounds: int, reps: int, cpu_time: bool, threads: int = 0, pause: float = PAUSE_S,
           numpy_gemm=np.matmul, min_block_s: float = MIN_BLOCK_S):
    """Seconds per call per shape for both sides: (ours, theirs, numpy's BLAS info), ``rounds`` x ``reps``
    blocks each, alternating per shape (ours, numpy, ours, ...) so both sides see the same machine load.
    ``cpu_time``: both sides on one thread, timed by thread CPU time."""
    native.set_num_threads(1 if cpu_time else threads)   # 0: the default pool size
    clock = time.thread_time if cpu_time else time.perf_counter
    ours = [[] for _ in shapes]
    theirs = [[] for _ in shapes]
    with numpy_threads(native.num_threads()):
        info = blas_info()
        pairs = GemmPairs(native, shapes, clock, numpy_gemm, min_block_s, pause)
        for _ in range(rounds):
            for i in range(len(shapes)):
                ours[i] += [pairs.ours_block(i) for _ in range(reps)]
                theirs[i] += [pairs.numpy_block(i) for _ in range(reps)]
    return ours, theirs, info


def shape_key(batch, m, k, n) -> str:
    return f"{batch}x{m}x{k}x{n}"


def run(quick: bool = False, use_torch: bool = True, native=None, clock=time.perf_counter, numpy_gemm=np.matmul,
        min_block_s: float = MIN_BLOCK_S, pause: float = PAUSE_S) -> dict:
    """The ``gemm`` section of an ``orion bench`` result (wall time, our default threads, numpy's BLAS set to
    as many): medians over rounds repeated until their spreads are within target (:mod:`.measure`).
    ``native``, ``clock``, ``numpy_gemm``: the two sides and the timer (replaceable in tests)."""
    if native is None:
        native = _native
    shapes = QUICK_SHAPES if quick else SHAPES
    native.set_num_threads(0)
    flops = [2.0 * batch * m * k * n for _name, batch, m, k, n in shapes]
    keys = [shape_key(*s[1:]) for s in shapes]
    with numpy_threads(native.num_threads()):
        info = blas_info()
        pairs = GemmPairs(native, shapes, clock, numpy_gemm, min_block_s, pause)

        def one_round():
            out = {}
            for i, key in enumerate(keys):
                ours, theirs = flops[i] / pairs.ours_block(i) / 1e9, flops[i] / pairs.numpy_block(i) / 1e9
                out.update({f"orion_gflops_{key}": ours, f"numpy_gflops_{key}": theirs,
                            f"ratio_vs_numpy_{key}": ours / theirs})
            return out
        rep = repeat(one_round, time_cap=time_cap(quick), clock=clock)
    metrics = {}
    for key in keys:
        metrics[f"orion_gflops_{key}"] = figure(rep.samples[f"orion_gflops_{key}"], "GFLOP/s", "higher")
        metrics[f"numpy_gflops_{key}"] = figure(rep.samples[f"numpy_gflops_{key}"], "GFLOP/s", "higher")
        metrics[f"ratio_vs_numpy_{key}"] = figure(rep.samples[f"ratio_vs_numpy_{key}"], "x", "higher")
    notes = [f"medians of {rep.reps} rounds (stopped: {rep.stopped}); each sample a block of >= "
             f"{min_block_s * 1e3:.0f} ms of back-to-back calls; ratio = orion / numpy float32, per round"]
    forced = {k: os.environ[k] for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if k in os.environ}
    if forced:
        notes.append("numpy's OpenBLAS runs with " + ", ".join(f"{k}={v}" for k, v in forced.items()) +
                     f" from the environment (kernel {info.get('architecture')}), not necessarily its best here")
    return {"params": {"shapes": [list(s) for s in shapes], "repeat": rep.summary(),
                       "calls_per_block": {k: list(c) for k, c in zip(keys, pairs.calls)},
                       "orion_isa": native.kernel_isa(), "orion_threads": native.num_threads(), "numpy_blas": info},
            "notes": notes, "metrics": metrics}
