"""The CPU classifier (models/classifier.py), fp16 panels vs int8 codes, one token's logits at a vocabulary x width
(default the Llama-3.2-1B shape: 128,256 x 2,048): bytes held, build seconds, and seconds per logits call - the two
taking turns in blocks (orion.bench.measure.alternating_blocks), so the ratio is per round.

    PYTHONPATH=python:BUILD python benchmarks/bench_classifier.py [--vocab 128256 --width 2048 --columns 1]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from orion import _native
from orion.bench.measure import alternating_blocks, figure
from orion.models import classifier


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vocab", type=int, default=128256)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--columns", type=int, default=1, help="hidden states per call (1: a decode step)")
    ap.add_argument("--seconds", type=float, default=20.0, help="time cap of the alternating blocks")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    W = (rng.standard_normal((args.vocab, args.width)) * 0.02).astype(np.float16)
    built, build_s = {}, {}
    for kind in classifier.WEIGHTS:
        t = time.perf_counter()
        built[kind] = classifier.build(W, kind)
        build_s[kind] = time.perf_counter() - t
    h = rng.standard_normal((args.width, args.columns)).astype(np.float16)

    def side(weight):
        def call():
            t = time.perf_counter()
            _native.gemm_panels_f16(weight, h, f32_out=True, trans_out=True)
            return {"s": time.perf_counter() - t}
        return call
    rep = alternating_blocks({k: side(w) for k, w in built.items()}, time_cap=args.seconds,
                             derived=lambda r: {"speedup": r["fp16 s"] / r["int8 s"]})
    print(f"classifier {args.vocab} x {args.width}, {args.columns} column(s), {rep.reps} rounds ({rep.stopped})")
    for kind in classifier.WEIGHTS:
        m = figure(rep.samples[f"{kind} s"], "s", "lower")
        print(f"  {kind}: {classifier.held_bytes(built[kind]) / 2**20:7.1f} MB, built in {build_s[kind]:.2f} s, "
              f"{m['value'] * 1e3:.3f} ms a call (spread {m['spread']:.0%})")
    m = figure(rep.samples["speedup"], "x", "higher")
    print(f"  int8 / fp16 speed: {m['value']:.2f}x (spread {m['spread']:.0%})")


if __name__ == "__main__":
    main()
