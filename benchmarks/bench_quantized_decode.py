"""Compressed weights at model size, side by side in one run, each scheme (and layer mode) in its own process
so that peak RSS is its own: fp16, int8 and lut4 weights decoding on the simulator, next to llama.cpp's
peak RSS for the same model in f16, q8_0 and q4_0 (``--llamacpp``).

Shapes (random fp16 checkpoints made by transformers, ``bench_llamacpp.write_llama_checkpoint``, with the Llama-2
tokenizer.model so that llama.cpp's converter reads them too): ``--shape 1b`` (default) Llama-3.2-1B's (16
layers, d 2048, d_ff 8192, GQA 32/8, vocab 128,256, tied; ``--layers`` changes the depth); ``--shape smollm``
SmolLM2-135M's (30 layers, d 576, 9/3 heads, vocab 32,000, tied: bench_llamacpp.py's ``--family smollm``).
Each is loaded as users load it - ``orion.models.load`` through the weight cache and the compressed-weight cache
beside it (both warmed once in the parent, so every child memory-maps them, as a user's second load does:
``quantize s`` is then that load's own time; the parent prints each scheme's first quantization).

Per row: ``load(..., quantize=scheme, stream_weights=...)`` (load time; ``--stream-modes auto off``: compressed rows
with each layer's weights kept compressed and decoded before its evals - the default - and with an fp16 copy of
every layer; the layers column says "streamed" where that applies), compile of the program sets the generation uses, prefill
of ``--prompt`` tokens, ``--tokens`` greedy decode steps (decode tok/s: the median step), then
``Model.memory()``. ``weight MB`` is what the stage programs' weight files hold (``Model.weight_bytes``; the
tied classifier runs on the CPU in every row). The memory target (issue 30): peak RSS <= 1.3 x (stored
weights + KV cache) + 200 MB, stored weights being the host weights as held (``Model.memory()["weights"]``:
compressed at their compressed size) and the KV cache as the programs hold it (``["kv_cache"]``: a shared layer's at
its own size, held on the host and copied in, where its program's C12-sized inputs dwarf it - stages.cache_copied_in).

llama.cpp (``--llamacpp DIR``, built by scripts/build_llamacpp.sh): the same checkpoint converted by its
``convert_hf_to_gguf.py`` (f16, q8_0) and ``llama-quantize`` (q4_0, from the f16 file), peak RSS of
``llama-bench -p 0 -n 0 -pg PROMPT,TOKENS -r 1`` (load, prompt, generation; the GGUF memory-mapped), read by
``wait4`` in a small launcher process (a child forked from this one would inherit its peak).

    PYTHONPATH=python:BUILD python benchmarks/bench_quantized_decode.py [--shape 1b|smollm]
        [--schemes fp16 int8 lut4] [--layer-modes auto] [--prompt 16] [--tokens 16] [--layers 16]
        [--stream-modes auto off] [--llamacpp DIR] [--threads 2] [--json out.json]
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
sys.path.insert(0, HERE)

GGUF_TYPES = {"fp16": "f16", "int8": "q8_0", "lut4": "q4_0"}    # llama.cpp's nearest scheme to each of ours

# runs argv[1:] as its one child and prints the child's peak RSS (KiB, wait4) as its last line: a process this
# small, so the child's figure is its own
_LAUNCHER = ("import os, sys\n"
             "pid = os.fork()\n"
             "if pid == 0:\n"
             "    os.execv(sys.argv[1], sys.argv[1:])\n"
             "_, status, usage = os.wait4(pid, 0)\n"
             "print(usage.ru_maxrss, flush=True)\n"
             "sys.exit(os.waitstatus_to_exitcode(status))\n")


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


def checkpoint(shape: str, layers: int, work: str) -> str:
    """The random checkpoint of ``shape`` (made once in ``work``)."""
    import bench_llamacpp
    name = "smollm-random" if shape == "smollm" else f"1b-L{layers}-random"
    out = os.path.join(work, name)
    if not os.path.exists(os.path.join(out, "model.safetensors")):
        extra = {} if shape == "smollm" else {"num_hidden_layers": layers}
        bench_llamacpp.write_llama_checkpoint(out, seed=0, family=shape, **extra)
    return out


def llamacpp_peak_rss(llamacpp: str, ckpt: str, work: str, scheme: str, prompt: int, tokens: int,
                      threads: int) -> float:
    """llama.cpp's peak RSS (MB) for the checkpoint in ``scheme``'s nearest GGUF type."""
    import bench_llamacpp
    t = GGUF_TYPES[scheme]
    name = os.path.basename(ckpt)
    f16 = bench_llamacpp.convert(os.path.join(llamacpp, "llama.cpp"), ckpt, "f16", os.path.join(work, f"{name}-f16.gguf"))
    gguf = os.path.join(work, f"{name}-{t}.gguf")
    if t == "q8_0":
        bench_llamacpp.convert(os.path.join(llamacpp, "llama.cpp"), ckpt, t, gguf)
    elif t != "f16" and not (os.path.exists(gguf) and os.path.getmtime(gguf) > os.path.getmtime(f16)):
        bench_llamacpp.run([os.path.join(llamacpp, "build", "bin", "llama-quantize"), f16, gguf, t.upper()])
    gguf = f16 if t == "f16" else gguf
    out = bench_llamacpp.run([sys.executable, "-c", _LAUNCHER, os.path.join(llamacpp, "build", "bin", "llama-bench"),
                              "-m", gguf, "-t", str(threads), "-p", "0", "-n", "0", "-pg", f"{prompt},{tokens}",
                              "-r", "1"])
    return int(out.strip().splitlines()[-1]) / 1024.0


def child(scheme: str, args) -> dict:
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    import orion
    from orion.models import load
    orion.sim.set_compile_budget(10**6)
    orion._native.set_num_threads(args.threads)
    quantize = None if scheme == "fp16" else scheme
    t = time.perf_counter()
    stream = {"auto": "auto", "off": False}[args.stream_mode]
    m = load(args.ckpt, cache=args.cache, device="sim", quantize=quantize, layers=args.layer_mode, stream_weights=stream)
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
    return dict(scheme=scheme, layers=eng.compile_plan()["layers"] + (" streamed" if eng.streaming and
                                                                     eng.shared_layers else ""), quant_s=quant_s, compile_s=compile_s,
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
                    help="folder of the checkpoint, the weight caches and the GGUF files (reused)")
    ap.add_argument("--llamacpp", help="the folder scripts/build_llamacpp.sh built: llama.cpp's peak RSS beside ours")
    ap.add_argument("--threads", type=int, default=2, help="threads of both sides")
    ap.add_argument("--json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--stream-modes", nargs="+", default=["auto"], choices=["auto", "off"],
                    help="stream_weights of the compressed rows: auto (shared layers keep their weights compressed) "
                         "and/or off (an fp16 copy of every layer)")
    ap.add_argument("--layer-mode", default="auto", help=argparse.SUPPRESS)
    ap.add_argument("--stream-mode", default="auto", help=argparse.SUPPRESS)
    ap.add_argument("--ckpt", help=argparse.SUPPRESS)
    ap.add_argument("--cache", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print("RESULT " + json.dumps(child(args.child, args)), flush=True)
        return
    common = ["--shape", args.shape, "--prompt", str(args.prompt), "--tokens", str(args.tokens),
              "--layers", str(args.layers), "--threads", str(args.threads)]
    sys.path.insert(0, os.path.join(HERE, "..", "python"))
    from orion.models.loaders import load_weights
    from orion.models.quantize import quantize_model
    os.makedirs(args.work, exist_ok=True)
    ckpt, cache = checkpoint(args.shape, args.layers, args.work), os.path.join(args.work, "cache")
    t = time.perf_counter()
    ck = load_weights(ckpt, cache=cache)         # converted once: the children map the cached fp16 file
    print(f"weight cache ready in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    for s in args.schemes:                       # and compressed once: they map the compressed weights too
        if s != "fp16":
            t = time.perf_counter()
            quantize_model(ck.weights, s, cache_file=ck.cache_file)
            print(f"{s}: compressed-weight cache ready in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    del ck
    common += ["--ckpt", ckpt, "--cache", cache]
    llama_rss = {}
    if args.llamacpp:
        for s in args.schemes:
            llama_rss[s] = llamacpp_peak_rss(args.llamacpp, ckpt, args.work, s, args.prompt, args.tokens,
                                             args.threads)
            print(f"llama.cpp {GGUF_TYPES[s]}: peak RSS {llama_rss[s]:,.0f} MB", file=sys.stderr, flush=True)
    rows = []
    runs = [(mode, s, sm) for mode in args.layer_modes for s in args.schemes for sm in args.stream_modes
            if sm == args.stream_modes[0] or (s != "fp16" and mode != "baked")]   # nothing to stream: one row
    for mode, s, sm in runs:
        p = subprocess.run([sys.executable, __file__, "--child", s, "--layer-mode", mode, "--stream-mode", sm,
                            *common], capture_output=True, text=True)
        line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            print(f"{s} ({mode}, stream {sm}): failed\n{p.stderr[-3000:]}", file=sys.stderr)
            continue
        r = json.loads(line[7:])
        rows.append(r)
        print(f"{s} ({mode}, stream {sm}): " + json.dumps({k: v for k, v in r.items() if k != "tokens"}),
              file=sys.stderr, flush=True)
    print("| weights | layers | weight MB (programs) | quantize s | compile s (programs) | prefill tok/s | "
          "decode tok/s | stored weights MB | KV cache MB | peak RSS MB | target MB | peak / target | "
          "greedy ids = fp16 | llama.cpp | llama.cpp peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ref = next((x["tokens"] for x in rows if x["scheme"] == "fp16" and
                    x["layers"].split()[0] == r["layers"].split()[0]), None)
        same = "–" if ref is None or r["scheme"] == "fp16" else \
            f"{sum(a == b for a, b in zip(r['tokens'], ref))}/{len(ref)}"
        ll = f"{GGUF_TYPES[r['scheme']]} | {llama_rss[r['scheme']]:,.0f}" if r["scheme"] in llama_rss else "– | –"
        print(f"| {r['scheme']} | {r['layers']} | {r['weight_mb']:,.0f} | {r['quant_s']:.1f} | {r['compile_s']:.1f} "
              f"({r['compiles']}) | {args.prompt / r['prefill_s']:.1f} | {1 / r['step_s']:.2f} | "
              f"{r['mem']['weights']:,.0f} | {r['mem']['kv_cache']:,.0f} | {r['rss_mb']:,.0f} | {target_mb(r):,.0f} | "
              f"{r['rss_mb'] / target_mb(r):.2f} | {same} | {ll} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "llamacpp_rss_mb": llama_rss}, f, indent=1)


if __name__ == "__main__":
    main()
