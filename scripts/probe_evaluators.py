"""The fp16 probe of a model (HostRun.feed of TOKENS tokens, the float64 reference at load) under orion.ir.evaluate as
it was at several git revisions, alternating in one process (the box drifts: only rounds that alternate compare);
prints each round's seconds and the medians. The current tree's evaluator is "HEAD+" (uncommitted included).

    PYTHONPATH=python:BUILD python scripts/probe_evaluators.py MODEL CACHE SCHEME [--revs d31ce32 826dca4] [--rounds 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time

import orion.models.host_run as host_run
from orion.ir import reference
from orion.models import load

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def evaluator_at(rev: str, folder: str):
    """``evaluate`` of python/orion/ir/reference.py at git revision ``rev`` (imported as a module of orion.ir)."""
    src = subprocess.run(["git", "-C", ROOT, "show", f"{rev}:python/orion/ir/reference.py"], check=True,
                         capture_output=True, text=True).stdout
    path = os.path.join(folder, f"reference_{rev}.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location(f"orion.ir.reference_{rev}", path)
    mod = importlib.util.module_from_spec(spec)
    mod.__package__ = "orion.ir"
    spec.loader.exec_module(mod)
    return mod.evaluate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("cache")
    ap.add_argument("scheme", help="fp16 or a quantization scheme (int8, lut4, ...)")
    ap.add_argument("--revs", nargs="*", default=[])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        impls = {rev: evaluator_at(rev, folder) for rev in a.revs}
        impls["HEAD+"] = reference.evaluate
        m = load(a.model, cache=a.cache, device="sim", quantize=None if a.scheme == "fp16" else a.scheme)
        times: dict = {k: [] for k in impls}
        for r in range(a.rounds):
            order = list(impls) if r % 2 == 0 else list(reversed(impls))
            for k in order:
                host_run.evaluate = impls[k]
                run = host_run.HostRun(m.config, m.weights, a.tokens, peaks=True)
                t = time.perf_counter()
                run.feed(list(range(3, 3 + a.tokens)))
                times[k].append(time.perf_counter() - t)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)
        host_run.evaluate = reference.evaluate
    print("medians: " + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in times.items()))


if __name__ == "__main__":
    sys.exit(main())
