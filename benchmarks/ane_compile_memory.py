"""Resident memory of one ANE compile with ~100 MB of weights, through the Linux fake framework.

    ORION_ANE_FRAMEWORK_PATH=BUILD/ane_fake/libAppleNeuralEngine.so PYTHONPATH=python:BUILD:tests/runtime \
        python benchmarks/ane_compile_memory.py [--device ane|sim] [--mb 100]

Prints VmRSS before the compile (weights already in Python), after it, after an eval and after the
release. With the fake, the (fake) device keeps its own program with the weights - as aned does on a Mac,
outside the process - so the ANE numbers include one device copy; what matters is the difference between
builds of the backend.
"""

from __future__ import annotations

import argparse
import gc
import json
import math

import numpy as np

import orion
from runtime_programs import linear_program, weight_blob


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="ane", choices=["ane", "sim"])
    ap.add_argument("--mb", type=float, default=100.0)
    a = ap.parse_args()
    c = int(math.sqrt(a.mb * 1e6 / 2) // 64 * 64)          # fp16 [c, c, 1, 1]
    w = (np.random.default_rng(0).standard_normal((c, c, 1, 1)) * 0.01).astype(np.float16)
    blob = weight_blob(w)
    del w
    gc.collect()
    x = np.random.default_rng(1).standard_normal((1, c, 1, 64)).astype(np.float16)
    r = {"device": a.device, "weights_mb": round(len(blob) / 2**20, 1), "before_mb": round(rss_mb(), 1)}
    prog = orion.compile_mil(linear_program(cin=c, cout=c, s=64), {"@model_path/weights/w.bin": blob},
                             device=a.device)
    r["after_compile_mb"] = round(rss_mb(), 1)
    prog(x=x)
    r["after_eval_mb"] = round(rss_mb(), 1)
    prog.release()
    orion._native.shutdown()
    gc.collect()
    r["after_release_mb"] = round(rss_mb(), 1)
    r["compile_growth_mb"] = round(r["after_compile_mb"] - r["before_mb"], 1)
    print(json.dumps(r))


if __name__ == "__main__":
    main()
