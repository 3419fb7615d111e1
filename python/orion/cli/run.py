"""``orion run PROGRAM.mil``: compile a hand-written MIL file (weights from its folder) and run it."""

from __future__ import annotations

import os
import time

import numpy as np

from ..errors import OrionError
from .common import add_device_flags, profile


def add_run_parser(sub) -> None:
    r = sub.add_parser("run", help="compile and run a hand-written MIL program")
    add_device_flags(r)
    r.add_argument("program", help="model.mil file")
    r.add_argument("--weights", help="folder whose *.bin files become @model_path/<relative path> (default: the "
                   "program's folder)")
    r.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="input array (default random)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--repeat", type=int, default=10)
    r.add_argument("--out", help="save outputs to this .npz file")
    r.set_defaults(func=cmd_run)


def _load_weights(folder: str) -> dict[str, bytes]:
    weights = {}
    for root, _dirs, files in os.walk(folder):
        for f in files:
            if f.endswith(".bin"):
                full = os.path.join(root, f)
                rel = os.path.relpath(full, folder).replace(os.sep, "/")
                with open(full, "rb") as fh:
                    weights["@model_path/" + rel] = fh.read()
    return weights


def cmd_run(args) -> int:
    from ..runtime import compile_mil

    with open(args.program, "rb") as f:
        text = f.read()
    folder = args.weights or os.path.dirname(os.path.abspath(args.program))
    prog = compile_mil(text, _load_weights(folder), device=args.device, profile=profile(args))
    rng = np.random.default_rng(args.seed)
    feeds = {}
    given = dict(kv.split("=", 1) for kv in args.input)
    for spec in prog.inputs:
        if spec.name in given:
            feeds[spec.name] = np.load(given[spec.name]).astype(spec.dtype)
        else:
            feeds[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
    unknown = set(given) - set(feeds)
    if unknown:
        raise OrionError(f"--input names {sorted(unknown)} are not inputs of the program")
    prog(**feeds)  # warm-up
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = prog(**feeds)
        times.append(time.perf_counter() - t0)
    print(prog)
    for name, arr in out.items():
        a = arr.astype(np.float64)
        print(f"  {name}: {arr.dtype}{list(arr.shape)} mean {a.mean():.6g} std {a.std():.6g} "
              f"min {a.min():.6g} max {a.max():.6g} non-finite {int((~np.isfinite(a)).sum())}")
    print(f"  eval median {np.median(times) * 1e3:.3f} ms over {args.repeat} runs; modelled ANE time "
          f"{prog.cost.get('est_ms', 0):.3f} ms")
    if args.out:
        np.savez(args.out, **out)
        print(f"  outputs saved to {args.out}")
    return 0
