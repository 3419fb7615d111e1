"""Compressed weights in the simulator's 1x1 conv: plan bytes and eval time of one linear layer
held as fp16 vs as int8 (constexpr_affine_dequantize), LUT 4/6-bit (constexpr_lut_to_dense) and blockwise
int4 (constexpr_blockwise_shift_scale), each decoded per 16-row panel inside the GEMM. Every compressed
result is checked bit-equal to the fp16 program on the dequantized weight before it is timed.

    PYTHONPATH=python:BUILD python benchmarks/bench_compressed_gemm.py [--shapes 2048x8192 8192x2048]
        [--cols 16 64] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "sim"))

SCHEMES = {"int8": ("int8", {}), "lut6": ("lut6", {"lut_group_size": 16}), "lut4": ("lut4", {"lut_group_size": 16}),
           "int4": ("int4", {"block_size": 32})}


def _time(prog, x, repeats):
    prog(x=x)                                                     # warm-up
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        prog(x=x)
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def main() -> None:
    import orion
    from orion.quant import quantize_tensor
    from test_constexpr_weights import dense_program, quantized_program

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["2048x8192", "8192x2048"], help="IN x OUT of the linear")
    ap.add_argument("--cols", nargs="+", type=int, default=[16, 64], help="sequence columns (16 = decode)")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    print("| linear (in x out) | S | weights | plan weight MB | vs fp16 | eval ms | vs fp16 |")
    print("|---|---|---|---|---|---|---|")
    for shape in args.shapes:
        cin, out = (int(v) for v in shape.split("x"))
        w = (np.random.default_rng(0).standard_normal((out, cin)) * 0.02).astype(np.float16)
        qs = {name: quantize_tensor(w, s, **kw).expand_rank(4) for name, (s, kw) in SCHEMES.items()}
        for S in args.cols:
            x = np.random.default_rng(1).standard_normal((1, cin, 1, S)).astype(np.float16)
            base = orion.compile_mil(*dense_program(w.reshape(out, cin, 1, 1), S), device="sim")
            tb, mb = _time(base, x, args.repeats), base.cost["weight_bytes"] / 2**20
            print(f"| {cin} x {out} | {S} | fp16 | {mb:.2f} | 1.00 | {tb * 1e3:.2f} | 1.00 |")
            for name, q in qs.items():
                p = orion.compile_mil(*quantized_program(q, S), device="sim")
                ref = orion.compile_mil(*dense_program(q.dequantize(), S), device="sim")
                assert np.array_equal(p(x=x)["y"].view(np.uint16), ref(x=x)["y"].view(np.uint16)), name
                t, m = _time(p, x, args.repeats), p.cost["weight_bytes"] / 2**20
                print(f"| | | {name} | {m:.2f} | {m / mb:.2f} | {t * 1e3:.2f} | {t / tb:.2f} |")
                del p, ref


if __name__ == "__main__":
    main()
