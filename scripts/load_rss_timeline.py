"""Where a model's peak RSS falls: loads MODEL (through the weight cache CACHE) with QUANTIZE (fp16 or a scheme),
builds the engine (the float64 probe), prepares a 64 + 32 generation (the layers' captures, then the CPU
classifier), prefills and steps, sampling VmRSS every 50 ms; prints each phase's peak and end, then Model.memory().
Linux only (/proc/self/status).

    PYTHONPATH=python:BUILD python scripts/load_rss_timeline.py MODEL CACHE QUANTIZE
"""

from __future__ import annotations

import sys
import threading
import time

from orion.models import classifier, load


def main() -> None:
    path, cache, scheme = sys.argv[1:4]
    samples, marks, stop = [], [], threading.Event()

    def sample():
        while not stop.is_set():
            with open("/proc/self/status") as f:
                rss = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS"))
            samples.append((time.perf_counter(), rss // 1024))
            time.sleep(0.05)

    def mark(what):
        marks.append((time.perf_counter(), what))

    build = classifier.build

    def timed_build(*a, **k):                     # the classifier is built at the end of prepare
        mark("prepare: layers")
        out = build(*a, **k)
        mark("prepare: classifier")
        return out
    classifier.build = timed_build
    threading.Thread(target=sample, daemon=True).start()
    mark("start")
    m = load(path, cache=cache, device="sim", quantize=None if scheme == "fp16" else scheme)
    mark("load")
    eng = m.engine
    mark("engine (probe)")
    eng.prepare(64, 96)
    eng.reset(96)
    eng.prefill(list(range(64)))
    for _ in range(8):
        eng.step(1)
    mark("prefill + 8 steps")
    stop.set()
    prev = marks[0][0]
    for t, what in marks[1:]:
        seg = [r for ts, r in samples if prev <= ts <= t] or [0]
        print(f"{what:22s} until {t - marks[0][0]:6.1f} s: peak {max(seg)} MB, end {seg[-1]} MB")
        prev = t
    print("memory() MB:", {k: v >> 20 for k, v in m.memory().items() if isinstance(v, int)})


if __name__ == "__main__":
    main()
