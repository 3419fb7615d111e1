"""Deep-narrow decode: baked per-layer programs vs one shared program for every middle stage, on
the SmolLM2-135M shape (30 layers, d_model 576, 9 query / 3 KV heads, head_dim 64, d_ff 1536, vocab 32,000,
random weights, fp16; also int8 weights).

Each (layers, quantize) configuration runs in its own process (a fresh compile budget, C05: the baked
fp16 model alone needs 62 compiles for a prefill and a decode set, int8 splits its stages), the rounds
interleave the configurations, and each figure is the median over rounds of orion.bench.decode's medians
(one prefill of 64 tokens, 31 decode steps, greedy). Compiles are counted per configuration.

    PYTHONPATH=python:BUILD python benchmarks/bench_depth.py --rounds 3 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPE = dict(dim=576, n_layers=30, n_heads=9, n_kv_heads=3, vocab_size=32000, hidden_dim=1536, seq_len=256)
CONFIGS = [("baked", None), ("shared", None), ("baked", "int8"), ("shared", "int8")]


def one(layers: str, quantize: str | None, n_prompt: int, n_tokens: int) -> dict:
    """In this process: the model's compile plan, compiles and decode figures (orion.bench.decode's loop)."""
    from orion.bench.decode import bench_orion
    from orion.models import Model
    from orion.train.model import init_params, llama_config
    cfg = llama_config(**SHAPE)
    w = {k: np.asarray(v, np.float16) for k, v in init_params(cfg, seed=0).items()}
    prompt = [int(t) for t in np.random.default_rng(1).integers(3, cfg.vocab_size, n_prompt)]
    import resource

    from orion.models import stages
    plan = Model(cfg, w, device="sim", quantize=quantize, layers=layers).compile_plan()    # lowering only
    middle: list = []             # decode-time (1 live column) evals of the middle stages, seconds

    def timed(run):
        def wrapper(self, feed, live=None):
            t = time.perf_counter()
            out = run(self, feed, live)
            if live == 1 and ("q_attn" in feed and "cos" in feed):      # a middle stage (attention + next qkv)
                middle.append(time.perf_counter() - t)
            return out
        return wrapper
    stages.Stage.run = timed(stages.Stage.run)
    stages.LayerStage.run = timed(stages.LayerStage.run)
    stages.SplitStage.run = timed(stages.SplitStage.run)     # its parts' feeds hold either q_attn or cos
    r = bench_orion(cfg, w, prompt, n_tokens, "sim", "cpu", 1, quantize=quantize, layers=layers)
    return dict(layers=layers, quantize=quantize, compiles=r["compiles"], plan=plan, compile_s=r["compile_s"],
                prefill_s=r["prefill_s"], step_s=r["step_s"], tokens=r["tokens"],
                middle_stage_ms=1e3 * float(np.median(middle)),
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--json", default=None)
    ap.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)     # layers quantize (child)
    a = ap.parse_args(argv)
    if a.one:
        q = None if a.one[1] == "none" else a.one[1]
        print(json.dumps(one(a.one[0], q, a.prompt, a.tokens)))
        return 0
    runs: dict = {}
    for r in range(a.rounds):
        for layers, q in CONFIGS:
            p = subprocess.run([sys.executable, __file__, "--one", layers, q or "none", "--prompt", str(a.prompt),
                                "--tokens", str(a.tokens)], capture_output=True, text=True, env=os.environ)
            if p.returncode:
                print(p.stderr[-2000:], file=sys.stderr)
                return 1
            res = json.loads(p.stdout.strip().splitlines()[-1])
            runs.setdefault((layers, q), []).append(res)
            print(f"round {r}: {layers:6s} {q or 'fp16':5s} decode {1 / res['step_s']:6.1f} tok/s  prefill "
                  f"{a.prompt / res['prefill_s']:7.1f} tok/s  compiles {res['compiles']:3d}  "
                  f"compile {res['compile_s']:.1f} s"
                  f"  middle stage {res['middle_stage_ms']:.3f} ms  peak RSS {res['peak_rss_mb']:.0f} MB", flush=True)
    summary = {}
    for (layers, q), rs in runs.items():
        summary[f"{layers}/{q or 'fp16'}"] = dict(
            decode_tok_s=float(np.median([1 / x["step_s"] for x in rs])),
            prefill_tok_s=float(np.median([a.prompt / x["prefill_s"] for x in rs])),
            compiles=rs[0]["compiles"], plan=rs[0]["plan"], same_tokens=all(x["tokens"] == rs[0]["tokens"] for x in rs),
            middle_stage_ms=float(np.median([x["middle_stage_ms"] for x in rs])),
            peak_rss_mb=float(np.median([x["peak_rss_mb"] for x in rs])))
    for q, qq in (("fp16", None), ("int8", "int8")):
        b, s = summary[f"baked/{q}"], summary[f"shared/{q}"]
        print(f"{q}: shared/baked decode {s['decode_tok_s'] / b['decode_tok_s']:.2f}x, prefill "
              f"{s['prefill_tok_s'] / b['prefill_tok_s']:.2f}x, compiles {b['compiles']} -> {s['compiles']}, middle "
              f"stage {b['middle_stage_ms']:.3f} -> {s['middle_stage_ms']:.3f} ms, peak RSS {b['peak_rss_mb']:.0f} -> "
              f"{s['peak_rss_mb']:.0f} MB, the same greedy tokens: "
              f"{runs[('baked', qq)][0]['tokens'] == runs[('shared', qq)][0]['tokens']}")
    base = {k.split("/")[1]: v for k, v in summary.items() if k.startswith("baked")}
    shared = {k.split("/")[1]: v for k, v in summary.items() if k.startswith("shared")}
    print("int8/fp16 decode, shared:", round(shared["int8"]["decode_tok_s"] / shared["fp16"]["decode_tok_s"], 2),
          " baked:", round(base["int8"]["decode_tok_s"] / base["fp16"]["decode_tok_s"], 2))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
