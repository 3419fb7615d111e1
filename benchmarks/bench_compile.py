"""Compile-time benchmark: all forward + backward programs of a 12-layer, 768-wide Llama-style model.

Programs per layer follow the static training pipeline of maderix/ANE's train_large.m (fwdAttn, fwdFFN,
ffnBwd, sdpaBwd1, sdpaBwd2, qkvBwd), S = 256, 12 heads, hidden 2048, RoPE, RMSNorm, SwiGLU. Two strategies:
  static  — weights baked (72 programs, every layer's weights and transposes in blob files)
  dynamic — weights as program inputs (6 programs shared by all layers)
Measured: Graph build + passes + MIL text + MILBlob files, written to a folder per program
(model.mil + weights/), in Python. Target: < 1 s for the whole set.

    PYTHONPATH=python:<build> python benchmarks/bench_compile.py [--layers 12] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from orion.compiler import lower  # noqa: E402
from orion.ir import Graph, ops  # noqa: E402

D, H, HEADS, S = 768, 2048, 12, 256
HD = D // HEADS


def layer_weights(rng, layer: int) -> dict[str, np.ndarray]:
    f = np.float32
    return {"rms1": np.ones(D, f), "rms2": np.ones(D, f),
            "wq": rng.standard_normal((D, D), f) * 0.02, "wk": rng.standard_normal((D, D), f) * 0.02,
            "wv": rng.standard_normal((D, D), f) * 0.02, "wo": rng.standard_normal((D, D), f) * 0.02,
            "w1": rng.standard_normal((H, D), f) * 0.02, "w3": rng.standard_normal((H, D), f) * 0.02,
            "w2": rng.standard_normal((D, H), f) * 0.02}


def _heads(v):
    return ops.reshape(v, (1, HEADS, HD, S))


def fwd_attn(w) -> Graph:
    g = Graph("fwd_attn")
    x = g.input("x", (1, D, 1, S))
    xn = ops.rms_norm(x, g.weight("rms1", w["rms1"]))
    q = ops.rope(ops.linear(xn, g.weight("wq", w["wq"])), HEADS)
    k = ops.rope(ops.linear(xn, g.weight("wk", w["wk"])), HEADS)
    v = ops.linear(xn, g.weight("wv", w["wv"]))
    a = ops.causal_attention(q, k, v, HEADS)
    g.output("o_out", ops.linear(a, g.weight("wo", w["wo"])))
    for name, val in (("q", q), ("k", k), ("v", v), ("attn_out", a), ("xnorm", xn)):
        g.output(name, val)
    return g


def fwd_ffn(w) -> Graph:
    g = Graph("fwd_ffn")
    x = g.input("x2", (1, D, 1, S))
    xn = ops.rms_norm(x, g.weight("rms2", w["rms2"]))
    h1 = ops.linear(xn, g.weight("w1", w["w1"]))
    h3 = ops.linear(xn, g.weight("w3", w["w3"]))
    gate = ops.mul(ops.silu(h1), h3)
    g.output("ffn_out", ops.linear(gate, g.weight("w2", w["w2"])))
    for name, val in (("h1", h1), ("h3", h3), ("gate", gate), ("xnorm2", xn)):
        g.output(name, val)
    return g


def ffn_bwd(w) -> Graph:
    g = Graph("ffn_bwd")
    dffn = g.input("dffn", (1, D, 1, S))
    h1 = g.input("h1", (1, H, 1, S))
    h3 = g.input("h3", (1, H, 1, S))
    dsilu = ops.linear(dffn, g.weight("w2t", w["w2"].T))
    sig = ops.sigmoid(h1)
    dh1 = dsilu * h3 * sig * (1.0 + h1 * (1.0 - sig))
    dh3 = dsilu * h1 * sig
    dx = ops.linear(dh1, g.weight("w1t", w["w1"].T)) + ops.linear(dh3, g.weight("w3t", w["w3"].T))
    g.output("dx", dx)
    g.output("dh1", dh1)
    g.output("dh3", dh3)
    return g


def sdpa_bwd1(w) -> Graph:
    g = Graph("sdpa_bwd1")
    q, k, v, dx2 = (g.input(n, (1, D, 1, S)) for n in ("q", "k", "v", "dx2"))
    da = _heads(ops.linear(dx2, g.weight("wot", w["wo"].T)))
    scores = ops.matmul(ops.mul(_heads(q), 1.0 / math.sqrt(HD)), _heads(k), transpose_x=True)
    from orion.ir.composites import causal_mask
    p = ops.softmax(ops.add(scores, causal_mask(S)), axis=-1)
    g.output("dv", ops.reshape(ops.matmul(da, p), (1, D, 1, S)))
    g.output("p", ops.reshape(p, (1, HEADS * S, 1, S)))
    g.output("dp", ops.reshape(ops.matmul(da, _heads(v), transpose_x=True), (1, HEADS * S, 1, S)))
    return g


def sdpa_bwd2(w) -> Graph:
    g = Graph("sdpa_bwd2")
    p = ops.reshape(g.input("p", (1, HEADS * S, 1, S)), (1, HEADS, S, S))
    dp = ops.reshape(g.input("dp", (1, HEADS * S, 1, S)), (1, HEADS, S, S))
    q, k = _heads(g.input("q", (1, D, 1, S))), _heads(g.input("k", (1, D, 1, S)))
    ds = ops.mul(ops.mul(p, ops.sub(dp, ops.reduce_sum(ops.mul(p, dp), [3]))), 1.0 / math.sqrt(HD))
    g.output("dq", ops.reshape(ops.matmul(k, ds, transpose_y=True), (1, D, 1, S)))
    g.output("dk", ops.reshape(ops.matmul(q, ds), (1, D, 1, S)))
    return g


def qkv_bwd(w) -> Graph:
    g = Graph("qkv_bwd")
    dq, dk, dv = (g.input(n, (1, D, 1, S)) for n in ("dq", "dk", "dv"))
    dx = (ops.linear(dq, g.weight("wqt", w["wq"].T)) + ops.linear(dk, g.weight("wkt", w["wk"].T))
          + ops.linear(dv, g.weight("wvt", w["wv"].T)))
    g.output("dx", dx)
    return g


BUILDERS = (fwd_attn, fwd_ffn, ffn_bwd, sdpa_bwd1, sdpa_bwd2, qkv_bwd)


def write_program(root: str, name: str, low) -> int:
    folder = os.path.join(root, name)
    os.makedirs(os.path.join(folder, "weights"), exist_ok=True)
    with open(os.path.join(folder, "model.mil"), "w") as f:
        f.write(low.mil)
    n = len(low.mil)
    for path, data in low.weights.items():
        with open(os.path.join(folder, path.replace("@model_path/", "")), "wb") as f:
            f.write(data)
        n += len(data)
    return n


def run(layers: int, strategy: str, root: str, weights) -> tuple[float, int, int, dict]:
    t0 = time.perf_counter()
    nbytes = count = 0
    phase = {"build": 0.0, "passes+codegen": 0.0, "write": 0.0}
    for layer in range(layers if strategy == "static" else 1):
        for build in BUILDERS:
            t = time.perf_counter()
            g = build(weights[layer])
            t1 = time.perf_counter()
            low = lower(g, dynamic_weights=True if strategy == "dynamic" else None)
            t2 = time.perf_counter()
            nbytes += write_program(root, f"{strategy}_l{layer:02d}_{g.name}", low)
            t3 = time.perf_counter()
            phase["build"] += t1 - t
            phase["passes+codegen"] += t2 - t1
            phase["write"] += t3 - t2
            count += 1
    return time.perf_counter() - t0, count, nbytes, phase


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--keep", help="write the programs here instead of a temporary folder")
    ap.add_argument("--repeat", type=int, default=3, help="best of N runs")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    weights = [layer_weights(rng, i) for i in range(args.layers)]
    for strategy in ("static", "dynamic"):
        best = None
        for _ in range(args.repeat):
            root = args.keep or tempfile.mkdtemp(prefix="orion-bench-compile-")
            try:
                result = run(args.layers, strategy, root, weights)
            finally:
                if not args.keep:
                    shutil.rmtree(root, ignore_errors=True)
            best = result if best is None or result[0] < best[0] else best
        secs, count, nbytes, phase = best
        detail = ", ".join(f"{k} {v:.3f} s" for k, v in phase.items())
        print(f"{strategy:8s} {count:3d} programs  {nbytes / 2**20:8.1f} MiB written  {secs:.3f} s  ({detail})"
              f"  target < 1 s: {'PASS' if secs < 1.0 else 'MISS'}")


if __name__ == "__main__":
    main()
