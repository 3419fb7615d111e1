"""``orion bench``: the benchmarks behind benchmarks/RESULTS.md (decode, training step, GEMM) in one run,
ours and the comparison side together; ``--json`` writes the result, ``--compare`` judges it against a
baseline result (noise: :mod:`orion.bench.compare`) and exits 3 when something regressed."""

from __future__ import annotations

import argparse
import json
import sys

from .common import check_writable_target, float_in

EXIT_REGRESSION = 3


def _only(text: str) -> list[str]:
    from ..bench import BENCHES
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in BENCHES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"expected a comma-separated list of {', '.join(BENCHES)}, got {text!r}")
    return names


def add_bench_parser(sub) -> None:
    from ..bench.compare import NOISE_FLOOR
    b = sub.add_parser("bench", help="run the decode / training-step / GEMM benchmarks, write JSON, compare "
                       "with a baseline", description="The benchmarks behind benchmarks/RESULTS.md (decode, "
                       "training step, GEMM), ours and the comparison side (PyTorch, numpy) in the same run. A "
                       "regression is a metric that got worse than the baseline's by more than max(--noise, the "
                       f"run-to-run spread of either run); exit {EXIT_REGRESSION} when there is one.")
    b.add_argument("--only", type=_only, default="decode,train,gemm", metavar="LIST",
                   help="comma-separated benchmarks to run: decode, train, gemm")
    b.add_argument("--quick", action="store_true", help="tiny shapes, few repetitions: seconds; checks the "
                   "machinery, not the performance (compare quick results only with quick baselines)")
    b.add_argument("--json", metavar="OUT", help="write the result document to OUT (schema orion-bench/1)")
    b.add_argument("--compare", metavar="BASELINE", help="a result written by --json earlier: report each metric's "
                   f"change and exit {EXIT_REGRESSION} when one got worse by more than the noise")
    b.add_argument("--noise", type=float_in(0.0, 1.0), default=NOISE_FLOOR, metavar="FRACTION",
                   help="smallest relative change that counts (the run-to-run spread measured raises it)")
    b.add_argument("--no-torch", action="store_true", help="skip the PyTorch sides even when torch is installed")
    b.set_defaults(func=cmd_bench)


def cmd_bench(args) -> int:
    from ..bench import run
    from ..bench.compare import check_result, compare
    from ..errors import InputError
    from ..fileio import atomic_write, read_json

    if args.json:
        check_writable_target("--json", args.json, folder=False)
    baseline = None
    if args.compare:                 # the whole baseline is checked before the long run, not after it
        baseline = read_json(args.compare, InputError)
        check_result(baseline, f"--compare {args.compare}")
    doc = run(args.only, quick=args.quick, use_torch=not args.no_torch,
              log=lambda m: print(m, file=sys.stderr, flush=True))
    for name, section in doc["benchmarks"].items():
        print(f"{name}:")
        for metric, m in section["metrics"].items():
            print(f"  {metric:34s} {m['value']:12.4g} {m['unit']:16s} spread {m['spread']:.0%}")
        for note in section["notes"]:
            print(f"  note: {note}")
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
    print(f"compared {len(findings)} metric(s) with {args.compare}: {len(bad)} regression(s)")
    return EXIT_REGRESSION if bad else 0
