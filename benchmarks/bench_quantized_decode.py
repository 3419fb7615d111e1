"""Compressed weights at model size, side by side in one run, each scheme (and layer mode) in its own process
so that peak RSS is its own: fp16, int8 and lut4 weights decoding on the simulator.

Shapes: ``--shape 1b`` (default) a Llama-3.2-1B-shaped random Llama (16 layers, d 2048, d_ff 8192, GQA 32/8,
vocab 128,256, tied; shape of benchmarks/bench_families.py), weights drawn in the process; ``--shape smollm``
SmolLM2-135M's (30 layers, d 576, 9/3 heads, vocab 32,000, tied: bench_llamacpp.py's ``--family smollm``), a
transformers-made random fp16 checkpoint loaded as users load it - ``orion.models.load`` through the weight
cache and the compressed-weight cache beside it (both warmed once in the parent, so every child memory-maps
them, as a user's second load does: ``quantize s`` is then that load's own time; the parent prints each
scheme's first quantization).

Per row: ``Model(..., quantize=scheme)`` (quantization time), compile of the program sets the generation uses,
prefill of ``--prompt`` tokens, ``--tokens`` greedy decode steps (decode tok/s: the median step), then
``Model.memory()``. ``weight MB`` is what the stage programs' weight files hold (``Model.weight_bytes``; the
tied classifier runs on the CPU in every row). The memory target (issue 30): peak RSS <= 1.3 x (stored
weights + KV cache) + 200 MB, stored weights being the host weights as held (``Model.memory()["weights"]``:
compressed at their compressed size) and the KV cache as the programs hold it (``["kv_cache"]``).

    PYTHONPATH=python:BUILD python benchmarks/bench_quantized_decode.py [--shape 1b|smollm]
        [--schemes fp16 int8 lut4] [--layer-modes auto] [--prompt 16] [--tokens 16] [--layers 16] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _peak_rss_mb() -> float:
    """This process's peak resident set: VmHWM (Linux), which starts afresh at exec - ru_maxrss also counts
    the parent's peak before the fork (929 MB in every row of a run whose parent had made the checkpoint
    with torch)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError):
        pass
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


SMOLLM = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
              num_key_value_heads=3, tie_word_embeddings=True)      # bench_llamacpp.LLAMA_SHAPES["smollm"]


def smollm_checkpoint(out: str) -> str:
    """A random SmolLM2-135M-shaped Llama in fp16 safetensors, made by transformers (once)."""
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=32000, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, **SMOLLM)
        LlamaForCausalLM(cfg).to(torch.float16).save_pretrained(out, safe_serialization=True)
    return out


def child(scheme: str, args) -> dict:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import orion
    from orion.models import Model, load
    orion.sim.set_compile_budget(10**6)
    quantize = None if scheme == "fp16" else scheme
    t = time.perf_counter()
    if args.shape == "smollm":
        m = load(args.ckpt, cache=args.cache, device="sim", quantize=quantize, layers=args.layer_mode)
    else:
        cfg = _config(args.layers)
        w = _weights(cfg)
        t = time.perf_counter()
        m = Model(cfg, w, device="sim", quantize=quantize, layers=args.layer_mode)
        del w
    quant_s = time.perf_counter() - t
    cfg, eng = m.config, m.engine
    prompt = [int(i) for i in np.random.default_rng(1).integers(3, cfg.vocab_size, args.prompt)]
    t = time.perf_counter()
    eng.prepare(len(prompt), len(prompt) + args.tokens)
    compile_s = time.perf_counter() - t
    eng.reset(len(prompt) + args.tokens)
    t = time.perf_counter()
    logits = eng.prefill(prompt)
    prefill_s = time.perf_counter() - t
    toks, steps = [int(np.argmax(logits))], []
    for _ in range(args.tokens - 1):
        t = time.perf_counter()
        logits = eng.step(toks[-1])
        steps.append(time.perf_counter() - t)
        toks.append(int(np.argmax(logits)))
    mem = {k: v / 2**20 for k, v in m.memory().items() if isinstance(v, int)}
    return dict(scheme=scheme, layers=eng.compile_plan()["layers"], quant_s=quant_s, compile_s=compile_s,
                compiles=eng.compiles, prefill_s=prefill_s, step_s=float(np.median(steps)),
                weight_mb=m.weight_bytes / 2**20, tokens=toks, rss_mb=_peak_rss_mb(), mem=mem)


def target_mb(r: dict) -> float:
    """Issue 30's bound: 1.3 x (stored weights + KV cache) + 200 MB."""
    return 1.3 * (r["mem"]["weights"] + r["mem"]["kv_cache"]) + 200


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=["1b", "smollm"], default="1b")
    ap.add_argument("--schemes", nargs="+", default=["fp16", "int8", "lut4"])
    ap.add_argument("--layer-modes", nargs="+", default=["auto"], choices=["auto", "baked", "shared"])
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--layers", type=int, default=16, help="--shape 1b: its depth")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "orion-bench-quantized"),
                    help="--shape smollm: folder of the checkpoint and the weight cache")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--layer-mode", default="auto", help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args)), flush=True)
        return
    common = ["--shape", args.shape, "--prompt", str(args.prompt), "--tokens", str(args.tokens),
              "--layers", str(args.layers)]
    if args.shape == "smollm":
        sys.path.insert(0, os.path.join(HERE, "..", "python"))
        from orion.models.loaders import load_weights
        ckpt, cache = smollm_checkpoint(os.path.join(args.work, "smollm-random")), os.path.join(args.work, "cache")
        ck = load_weights(ckpt, cache=cache)     # converted once: the children map the cached fp16 file
        from orion.models.quantize import quantize_model
        for s in args.schemes:                   # and compressed once: they map the compressed weights too
            if s != "fp16":
                t = time.perf_counter()
                quantize_model(ck.weights, s, cache_file=ck.cache_file)
                print(f"{s}: compressed-weight cache ready in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        del ck
        common += ["--ckpt", ckpt, "--cache", cache]
    rows = []
    for mode in args.layer_modes:
        for s in args.schemes:
            p = subprocess.run([sys.executable, __file__, "--child", s, "--layer-mode", mode, *common],
                               capture_output=True, text=True)
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is None:
                print(f"{s} ({mode}): failed\n{p.stderr[-3000:]}", file=sys.stderr)
                continue
            r = json.loads(line[7:])
            rows.append(r)
            print(f"{s} ({mode}): {r}", file=sys.stderr, flush=True)
    print("| weights | layers | weight MB (programs) | quantize s | compile s (programs) | prefill tok/s | "
          "decode tok/s | stored weights MB | KV cache MB | peak RSS MB | target MB | peak / target | "
          "greedy ids = fp16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ref = next((x["tokens"] for x in rows if x["scheme"] == "fp16" and x["layers"] == r["layers"]), None)
        same = "–" if ref is None or r["scheme"] == "fp16" else \
            f"{sum(a == b for a, b in zip(r['tokens'], ref))}/{len(ref)}"
        print(f"| {r['scheme']} | {r['layers']} | {r['weight_mb']:,.0f} | {r['quant_s']:.1f} | {r['compile_s']:.1f} "
              f"({r['compiles']}) | {args.prompt / r['prefill_s']:.1f} | {1 / r['step_s']:.2f} | "
              f"{r['mem']['weights']:,.0f} | {r['mem']['kv_cache']:,.0f} | {r['rss_mb']:,.0f} | {target_mb(r):,.0f} | "
              f"{r['rss_mb'] / target_mb(r):.2f} | {same} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
