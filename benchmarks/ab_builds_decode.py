"""Two builds of orion decoding the same checkpoint, alternating in fresh processes (a shared machine moves whole
phases by 2x: only rounds that alternate compare). Each process loads the checkpoint (through the weight cache in
``--cache``), prepares a ``--prompt`` + ``--tokens`` generation, prefills ``--prompt`` tokens and times ``--tokens``
- 1 decode steps; it prints the median step's tok/s, prefill tok/s, its peak RSS (VmHWM) and the seconds of its load +
prepare (the model definition's float64 probe, compiles and the layers' weight captures).

    python benchmarks/ab_builds_decode.py --a OLD_CHECKOUT/python:OLD_BUILD --b python:NEW_BUILD \\
        --model /tmp/bq/smollm-random --cache /tmp/bq/cache --schemes fp16 int8 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

_CHILD = r"""
import json, sys, time
import numpy as np
import orion
from orion.models import load
model, cache, scheme, prompt, tokens, threads = sys.argv[1:7]
prompt, tokens = int(prompt), int(tokens)
orion.sim.set_compile_budget(10**6)
orion._native.set_num_threads(int(threads))
t = time.perf_counter()
m = load(model, cache=cache, device="sim", quantize=None if scheme == "fp16" else scheme)
eng = m.engine
eng.prepare(prompt, prompt + tokens)
load_s = time.perf_counter() - t
eng.reset(prompt + tokens)
t = time.perf_counter()
eng.prefill(list(range(3, 3 + prompt)))
prefill = time.perf_counter() - t
steps = []
for _ in range(tokens - 1):
    t = time.perf_counter()
    eng.step(5)
    steps.append(time.perf_counter() - t)
with open("/proc/self/status") as f:
    peak = int(f.read().split("VmHWM:")[1].split()[0]) / 1024
print(json.dumps({"decode": 1 / float(np.median(steps)), "prefill": prompt / prefill, "peak_mb": peak,
                  "load_s": load_s}))
"""


def one(pythonpath: str, args, scheme: str) -> dict:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    out = subprocess.run([sys.executable, "-c", _CHILD, args.model, args.cache, scheme, str(args.prompt),
                          str(args.tokens), str(args.threads)], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="PYTHONPATH of the first build (e.g. the old checkout)")
    ap.add_argument("--b", required=True, help="PYTHONPATH of the second build")
    ap.add_argument("--model", required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--schemes", nargs="+", default=["fp16", "int8"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    got: dict = {}
    for r in range(args.rounds):
        for side, path in (("a", args.a), ("b", args.b)):
            for scheme in args.schemes:
                res = one(path, args, scheme)
                got.setdefault((side, scheme), []).append(res)
                print(f"round {r + 1} {side} {scheme}: decode {res['decode']:.2f} tok/s, prefill {res['prefill']:.1f} "
                      f"tok/s, peak {res['peak_mb']:.0f} MB, load {res.get('load_s', float('nan')):.1f} s", flush=True)
    for scheme in args.schemes:
        a, b = (np.median([x["decode"] for x in got[(s, scheme)]]) for s in ("a", "b"))
        pa, pb = (np.median([x["peak_mb"] for x in got[(s, scheme)]]) for s in ("a", "b"))
        la, lb = (np.median([x.get("load_s", np.nan) for x in got[(s, scheme)]]) for s in ("a", "b"))
        print(f"{scheme}: median decode a {a:.2f} / b {b:.2f} tok/s (b/a {b / a:.2f}x); peak a {pa:.0f} / b {pb:.0f} MB; "
              f"load + prepare a {la:.1f} / b {lb:.1f} s")


if __name__ == "__main__":
    main()
