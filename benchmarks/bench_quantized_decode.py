"""Compressed weights at model size: a Llama-3.2-1B-shaped random Llama (16 layers, d 2048, d_ff
8192, GQA 32/8, vocab 128,256, tied; shape of benchmarks/bench_families.py) decoding on the simulator with
fp16, int8 and lut4 weights, side by side in one run, each in its own process so that peak RSS is its own.

Per scheme: weights drawn per tensor (fp16), ``Model(..., quantize=scheme)`` (quantization time), compile of
the one program set a 16-token prompt uses (prefill and decode share S=16), prefill, ``--tokens`` greedy
decode steps; decode tok/s is the median step. ``weight MB`` is what the stage programs' weight files hold
(``Model.weight_bytes``; the tied classifier runs on the CPU in every row).

    PYTHONPATH=python:BUILD python benchmarks/bench_quantized_decode.py [--schemes fp16 int8 lut4]
        [--tokens 16] [--layers 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0      # Linux: KiB


def _config(layers: int):
    from orion.models import LlamaConfig
    return LlamaConfig(vocab_size=128256, n_ctx=128, d_model=2048, n_layers=layers, n_heads=32, n_kv_heads=8,
                       d_ff=8192, rope_theta=500000.0, tie_embeddings=True, bos_id=128000, eos_id=128001)


def _weights(cfg) -> dict:
    """Random canonical weights, one fp16 tensor at a time (no float64 copy of the embedding)."""
    from orion.models.loaders import expected_shapes
    rng = np.random.default_rng(0)
    out = {}
    for name, shape in expected_shapes(cfg).items():
        if name.endswith(("rms_att", "rms_ffn", "rms_final")):
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float16)
        else:
            out[name] = (0.02 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float16)
    return out


def child(scheme: str, tokens: int, layers: int) -> dict:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    from orion.models import Model
    cfg = _config(layers)
    w = _weights(cfg)
    t = time.perf_counter()
    m = Model(cfg, w, device="sim", quantize=None if scheme == "fp16" else scheme)
    quant_s = time.perf_counter() - t
    del w
    eng = m.engine
    prompt = [int(i) for i in np.random.default_rng(1).integers(0, cfg.vocab_size, 16)]
    t = time.perf_counter()
    eng.prepare(len(prompt), len(prompt) + tokens)
    compile_s = time.perf_counter() - t
    eng.reset(len(prompt) + tokens)
    t = time.perf_counter()
    logits = eng.prefill(prompt)
    prefill_s = time.perf_counter() - t
    toks, steps = [int(np.argmax(logits))], []
    for _ in range(tokens - 1):
        t = time.perf_counter()
        logits = eng.step(toks[-1])
        steps.append(time.perf_counter() - t)
        toks.append(int(np.argmax(logits)))
    return dict(scheme=scheme, quant_s=quant_s, compile_s=compile_s, compiles=eng.compiles, prefill_s=prefill_s,
                step_s=float(np.median(steps)), weight_mb=m.weight_bytes / 2**20, tokens=toks, rss_mb=_peak_rss_mb())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schemes", nargs="+", default=["fp16", "int8", "lut4"])
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args.tokens, args.layers)), flush=True)
        return
    rows = []
    for s in args.schemes:
        p = subprocess.run([sys.executable, __file__, "--child", s, "--tokens", str(args.tokens), "--layers",
                            str(args.layers)], capture_output=True, text=True)
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{s}: failed\n{p.stderr[-3000:]}", file=sys.stderr)
            continue
        r = json.loads(line[7:])
        rows.append(r)
        print(f"{s}: {r}", file=sys.stderr, flush=True)
    print("| weights | weight MB (programs) | quantize s | compile s (programs) | prefill tok/s | decode tok/s | "
          "peak RSS MB | greedy ids = fp16 |")
    print("|---|---|---|---|---|---|---|---|")
    ref = next((r["tokens"] for r in rows if r["scheme"] == "fp16"), None)
    for r in rows:
        same = "–" if ref is None or r["scheme"] == "fp16" else \
            f"{sum(a == b for a, b in zip(r['tokens'], ref))}/{len(ref)}"
        print(f"| {r['scheme']} | {r['weight_mb']:,.0f} | {r['quant_s']:.1f} | {r['compile_s']:.1f} ({r['compiles']}) | "
              f"{16 / r['prefill_s']:.1f} | {1 / r['step_s']:.2f} | {r['rss_mb']:,.0f} | {same} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
