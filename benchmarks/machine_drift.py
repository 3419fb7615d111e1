"""Does this machine hold its speed? In ONE process, for ``--seconds``, alternately: orion's quick training
step (``orion bench --quick``'s, orion.bench.train_step.QUICK) and a fixed numpy element-wise loop that has
nothing of orion in it; every ``--interval`` seconds, each one's median and their ratio.

If both columns move together, the machine's speed changes over time (a shared VM, frequency, a neighbour) and
no benchmark's absolute figures can be held to a 10 % spread from one run to the next; only ratios of sides
measured in the same moments can (orion.bench.measure.alternating_blocks). If only orion's column moves, look
at orion.

    PYTHONPATH=python:BUILD python benchmarks/machine_drift.py [--seconds 30] [--interval 1.5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from orion.bench.train_step import QUICK, OrionTrainSteps, setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=1.5)
    args = ap.parse_args()
    cfg, params, tokens = setup(QUICK["preset"], QUICK["layers"], QUICK["seq"])
    ours = OrionTrainSteps(cfg, {k: v.copy() for k, v in params.items()}, tokens, "dynamic", None)
    x = np.random.default_rng(0).random(100_000, dtype=np.float32)

    def plain_numpy():
        t = time.perf_counter()
        np.sqrt(x * np.float32(1.0001) + np.float32(0.5))
        return time.perf_counter() - t

    ours.step()
    plain_numpy()
    rows = []
    print(f"{'t (s)':>6} {'orion step (us)':>16} {'numpy loop (us)':>16} {'ratio':>7}")
    start = time.perf_counter()
    try:
        while time.perf_counter() - start < args.seconds:
            steps, loops = [], []
            t_end = time.perf_counter() + args.interval
            while time.perf_counter() < t_end:
                steps.append(ours.step()["total"])
                loops.append(plain_numpy())
            s, n = statistics.median(steps) * 1e6, statistics.median(loops) * 1e6
            rows.append((s, n))
            print(f"{time.perf_counter() - start:6.1f} {s:16.0f} {n:16.1f} {s / n:7.1f}", flush=True)
    finally:
        ours.release()
    ss, ns = [r[0] for r in rows], [r[1] for r in rows]
    rs = [a / b for a, b in rows]
    print(f"range (max / min): orion step {max(ss) / min(ss):.2f}x, numpy loop {max(ns) / min(ns):.2f}x, "
          f"their ratio {max(rs) / min(rs):.2f}x")


if __name__ == "__main__":
    main()
