"""``orion bench``: the benchmarks behind benchmarks/RESULTS.md (decode, training step, GEMM) in one run,
ours and the comparison side together, each figure a median repeated until its spread is within 10 % (or
marked unstable: :mod:`orion.bench.measure`); ``--json`` writes the result, ``--compare`` judges it against
a baseline result (noise: :mod:`orion.bench.compare`) and exits 3 when something regressed."""

from __future__ import annotations

import argparse
import json
import sys

from .. import bench as benchmarks
from ..bench import BENCHES, SCHEMA
from ..bench.compare import NOISE_FLOOR, check_result, compare
from ..bench.measure import QUICK_TIME_CAP, TARGET_SPREAD
from ..errors import InputError
from ..fileio import atomic_write, read_json
from .common import check_writable_target, float_in, int_in

EXIT_REGRESSION = 3


def _only(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in BENCHES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(BENCHES)}, got {text!r}")
    return names


def add_bench_parser(sub) -> None:
    b = sub.add_parser("bench", help="run the decode / training-step / GEMM benchmarks, write JSON, compare "
                       "with a baseline", description="The benchmarks behind benchmarks/RESULTS.md (decode, "
                       "training step, GEMM), ours and the comparison side (PyTorch, numpy) in the same run. Each "
                       "figure is the median of repetitions run until its spread (the width of the median's 95 % "
                       f"confidence interval, relative to it) is within {TARGET_SPREAD:.0%}, or marked UNSTABLE when "
                       "a time cap came first. A regression is a metric that got worse than the baseline's beyond "
                       f"both runs' spreads and by more than --noise; exit {EXIT_REGRESSION} when there is one.")
    b.add_argument("--only", type=_only, default="decode,train,gemm", metavar="LIST",
                   help="comma-separated benchmarks to run: decode, train, gemm")
    b.add_argument("--quick", action="store_true", help=f"tiny shapes and a {QUICK_TIME_CAP:g} s time cap per "
                   "measurement loop: seconds, not the performance of real shapes (compare quick results only with "
                   "quick baselines)")
    b.add_argument("--json", metavar="OUT", help=f"write the result document to OUT (schema {SCHEMA})")
    b.add_argument("--compare", metavar="BASELINE", help="a result written by --json earlier: report each metric's "
                   f"change and exit {EXIT_REGRESSION} when one got worse beyond the noise")
    b.add_argument("--noise", type=float_in(0.0, 1.0), default=NOISE_FLOOR, metavar="FRACTION",
                   help="smallest relative change that counts, even when both runs' spreads are narrower")
    b.add_argument("--no-torch", action="store_true", help="skip the PyTorch sides even when torch is installed")
    b.add_argument("--processes", type=int_in(1, 32), default=None, metavar="N",
                   help="measure each benchmark in N fresh processes and report the median of theirs, with a spread "
                        "that covers the spread between processes (default: 3 with --quick, whose tiny figures vary "
                        "most from one process to the next; else 1, in this process)")
    b.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    if args.json:
        check_writable_target("--json", args.json, folder=False)
    baseline = None
    if args.compare:                 # the whole baseline is checked before the long run, not after it
        baseline = read_json(args.compare, InputError)
        check_result(baseline, f"--compare {args.compare}")
    processes = args.processes if args.processes is not None else 3 if args.quick else 1
    doc = benchmarks.run(args.only, quick=args.quick, use_torch=not args.no_torch, processes=processes,
                         log=lambda m: print(m, file=sys.stderr, flush=True))
    unstable = []
    for name, section in doc["benchmarks"].items():
        print(f"{name}:")
        for metric, m in section["metrics"].items():
            stable = m.get("stable", True)
            reps = f" ({len(m['samples'])} reps)" if m.get("samples") else ""
            mark = "" if stable else "  UNSTABLE"
            print(f"  {metric:34s} {m['value']:12.4g} {m['unit']:8s} spread {m['spread']:4.0%}{reps}{mark}")
            if not stable:
                unstable.append(f"{name}.{metric}")
        for note in section["notes"]:
            print(f"  note: {note}")
    if unstable:
        print(f"UNSTABLE: {len(unstable)} figure(s) kept a spread over {TARGET_SPREAD:.0%} until the time cap "
              f"(a busy machine?): {', '.join(unstable)}")
    if args.json:
        with atomic_write(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"result: {args.json}")
    if baseline is None:
        return 0
    if bool(baseline.get("quick")) != doc["quick"]:
        print("note: one of the two runs is --quick and the other is not: their numbers are not comparable")
    findings = compare(doc, baseline, floor=args.noise)
    for f in findings:
        print(f.line())
    bad = [f for f in findings if f.verdict == "regression"]
    machine = sum(f.verdict == "machine" for f in findings)
    print(f"compared {len(findings)} metric(s) with {args.compare}: {len(bad)} regression(s)"
          + (f"; {machine} slower figure(s) whose comparison side slowed alike (the machine: not counted)"
             if machine else ""))
    return EXIT_REGRESSION if bad else 0
