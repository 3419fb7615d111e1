"""Where a model's load goes: cProfile of ``load`` + ``engine`` (the float64 probe) + ``prepare(PROMPT, PROMPT +
TOKENS)`` (compiles, the layers' captures, the CPU classifier); prints the phases' seconds, then the functions by
their own time and by cumulative time.

    PYTHONPATH=python:BUILD python scripts/profile_load.py MODEL CACHE SCHEME [--top 25] [--prompt 64 --tokens 32]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from orion.models import load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("cache")
    ap.add_argument("scheme", help="fp16 or a quantization scheme (int8, lut4, ...)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    times = {}

    def run():
        t0 = time.perf_counter()
        m = load(a.model, cache=a.cache, device="sim", quantize=None if a.scheme == "fp16" else a.scheme)
        t1 = time.perf_counter()
        eng = m.engine
        t2 = time.perf_counter()
        eng.prepare(a.prompt, a.prompt + a.tokens)
        times.update(load=t1 - t0, engine=t2 - t1, prepare=time.perf_counter() - t2)

    prof = cProfile.Profile()
    prof.runcall(run)
    print("seconds under the profiler: " + ", ".join(f"{k} {v:.1f}" for k, v in times.items()))
    stats = pstats.Stats(prof)
    stats.sort_stats("tottime").print_stats(a.top)
    stats.sort_stats("cumulative").print_stats(a.top)


if __name__ == "__main__":
    main()
