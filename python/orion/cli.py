"""The ``orion`` command line.

    orion demo                 compile and run a bundled program on the default device, check it
    orion run PROGRAM.mil      compile a hand-written MIL file (weights from its folder) and run it
    orion info                 build, kernels, threads, simulator profile and compile budget
    orion constraints          the emulated ANE constraints under a chip profile
    orion doctor               verify the weight-update strategies on this machine (and cache the verdict)
    orion generate --model PATH --prompt TEXT   generate text with GPT-2/Llama checkpoints
    orion train                train a small Llama on the bundled corpus (or your model and data)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np

from .errors import OrionError


def _profile(args):
    from .sim import Profile, get_profile

    base = get_profile()
    return Profile(chip=getattr(args, "chip", None) or base.chip,
                   strictness="permissive" if getattr(args, "permissive", False) else base.strictness)


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(device=args.device, profile=_profile(args), seq=args.seq, dim=args.dim, out=sys.stdout)


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
    from .runtime import compile_mil

    with open(args.program, "rb") as f:
        text = f.read()
    folder = args.weights or os.path.dirname(os.path.abspath(args.program))
    prog = compile_mil(text, _load_weights(folder), device=args.device, profile=_profile(args))
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


def cmd_info(args) -> int:
    from . import __version__, _native
    from .sim import compile_budget, get_profile

    print(f"orion {__version__}")
    print(f"  native module: {_native.__file__}")
    if hasattr(_native, "_k_isa"):
        print(f"  simulator kernels: {_native._k_isa()}, {_native._k_num_threads()} threads")
    print(f"  simulator profile: {get_profile()}")
    used, limit = compile_budget()
    print(f"  compile budget: {used} used of {limit}")
    from .runtime import devices

    for d in devices():
        state = "available" if d["available"] else f"unavailable ({d['reason']})"
        print(f"  backend {d['name']}: {state}")
        for route, status in (d.get("routes") or {}).items():
            print(f"    route {route}: {status}")
        if d["name"] == "ane":  # optional device-info probes that failed: reported, never a refusal
            from .doctor import ane_control

            for w in (ane_control("info") or {}).get("warnings") or []:
                print(f"    warning: {w}")
    return 0


def cmd_constraints(args) -> int:
    from .sim import constraints

    for c in constraints(_profile(args)):
        print(f"{c['id']}  {c['reaction']:<16} {c['where']:<10} {c['rule']}")
    return 0


def version_text() -> str:
    """``orion --version``: the release and what this build contains (one wheel runs on many CPUs)."""
    import platform

    from . import __version__, _native

    b = _native.build_info()
    abi = "abi3" if b["stable_abi"] else f"cp{sys.version_info[0]}{sys.version_info[1]}"
    return (f"orion {__version__} ({platform.system()} {platform.machine()}, Python {platform.python_version()}, "
            f"{abi} build)\n"
            f"  kernels: {', '.join(b['isas'])} compiled in, {b['isa']} in use\n"
            f"  backends: {', '.join(b['backends'])} compiled in\n"
            f"  compiler: {b['compiler']}")


class _VersionAction(argparse.Action):
    # argparse's own "version" action needs the text up front; this one asks the build (a backend probe) only
    # when --version is given.
    def __init__(self, option_strings, dest=argparse.SUPPRESS, **kw):
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        from . import _native

        if not hasattr(_native, "build_info"):
            parser.exit(1, f"orion: error: the native module {_native.__file__} is older than this orion package: "
                        "rebuild it (scripts/dev_build.sh or pip install .)\n")
        print(version_text())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="orion", description="Compile, run and train networks on the Apple Neural "
                                "Engine or its faithful simulator.")
    p.add_argument("-v", "--verbose", action="store_true", help="log what orion does")
    p.add_argument("-V", "--version", action=_VersionAction, help="version, kernels and backends of this build")
    sub = p.add_subparsers(dest="command")

    def common(sp):
        sp.add_argument("--device", default="auto", choices=["auto", "sim", "ane"])
        sp.add_argument("--chip", choices=["m1", "m2", "m3", "m4", "m5"], help="simulator chip profile")
        sp.add_argument("--permissive", action="store_true", help="allow contested ([X]) patterns")

    d = sub.add_parser("demo", help="compile and run a bundled RMSNorm + linear program and check it")
    common(d)
    d.add_argument("--dim", type=int, default=768)
    d.add_argument("--seq", type=int, default=256)
    d.set_defaults(func=cmd_demo)

    r = sub.add_parser("run", help="compile and run a hand-written MIL program")
    common(r)
    r.add_argument("program", help="model.mil file")
    r.add_argument("--weights", help="folder whose *.bin files become @model_path/<relative path> (default: the "
                   "program's folder)")
    r.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy", help="input array (default random)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--repeat", type=int, default=10)
    r.add_argument("--out", help="save outputs to this .npz file")
    r.set_defaults(func=cmd_run)

    i = sub.add_parser("info", help="build and simulator information")
    i.set_defaults(func=cmd_info)

    c = sub.add_parser("constraints", help="list the emulated ANE constraints")
    c.add_argument("--chip", choices=["m1", "m2", "m3", "m4", "m5"])
    c.add_argument("--permissive", action="store_true")
    c.set_defaults(func=cmd_constraints)

    from .doctor import add_doctor_parser
    from .cli_generate import add_generate_parser
    from .cli_train import add_train_parser
    add_train_parser(sub)
    add_generate_parser(sub)
    add_doctor_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except OrionError as e:
        print(f"orion: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except FileNotFoundError as e:
        print(f"orion: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
