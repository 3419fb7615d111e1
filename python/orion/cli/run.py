"""``orion run PROGRAM.mil``: compile a hand-written MIL file and run it.

Only the weight files the program names (``BLOBFILE(path = "@model_path/<rel>")``) are read, from the
program's folder or ``--weights``; missing ones are listed, or filled with seeded random tensors of the
declared dtype and shape (``--random-weights``). Outputs are printed as a table.
"""

from __future__ import annotations

import io
import os
import time

import numpy as np

from ..errors import InputError, ModelFormatError
from ..fileio import write_bytes_atomic
from ..native.blob import write_blob_file
from ..native.runtime import compile_mil
from .common import UsageError, add_device_flags, check_writable_target, positive_int, profile

MODEL_PATH = "@model_path/"
# MIL element types a MILBlob file holds and numpy can generate
_NUMPY = {"fp16": np.float16, "fp32": np.float32, "int8": np.int8, "uint8": np.uint8, "int16": np.int16,
          "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32}


def add_run_parser(sub) -> None:
    r = sub.add_parser("run", help="compile and run a hand-written MIL program",
                       description="Compile a MIL program (weights: the MILBlob files its BLOBFILE consts name, "
                                   "relative to its folder) and run it on random or given inputs.")
    add_device_flags(r)
    r.add_argument("program", help="model.mil file")
    r.add_argument("--weights", metavar="DIR", help="folder that @model_path/ stands for (default: the program's "
                   "folder)")
    r.add_argument("--random-weights", action="store_true", help="fill weight files that do not exist with seeded "
                   "random tensors of the declared dtype and shape (in memory; nothing is written)")
    r.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="input array from a .npy file (repeatable; inputs not given are random)")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs and --random-weights")
    r.add_argument("--repeat", type=positive_int, default=10, help="timed evaluations after one warm-up")
    r.add_argument("--out", metavar="FILE.npz", help="save outputs to this .npz file")
    r.set_defaults(func=cmd_run)


# ---- the program's weight files ---------------------------------------------------------------------

def blob_refs(parsed: dict) -> dict[str, dict[int, tuple[str, tuple]]]:
    """``{path: {offset: (mil dtype, shape)}}`` of every BLOBFILE literal of a parsed program."""
    refs: dict[str, dict[int, tuple[str, tuple]]] = {}
    for fn in parsed["functions"]:
        for st in fn["stmts"]:
            lits = list(st["attrs"].values()) + [a["literal"] for a in st["args"] if a["kind"] == "literal"]
            for lit in lits:
                if lit.get("kind") != "blobfile":
                    continue
                where = f"line {lit['line']}"
                decl = (lit["dtype"], tuple(lit["shape"]))
                seen = refs.setdefault(lit["path"], {}).setdefault(int(lit["offset"]), decl)
                if seen != decl:
                    raise InputError(f"{where}: {lit['path']} offset {lit['offset']} is declared as {decl[0]}"
                                     f"{list(decl[1])} here and as {seen[0]}{list(seen[1])} elsewhere")
    return refs


def _file_for(path: str, folder: str) -> str:
    if not path.startswith(MODEL_PATH):
        raise InputError(f"weight path {path!r} does not start with {MODEL_PATH!r}; orion run resolves only "
                         f"{MODEL_PATH}<file> against the weights folder")
    full = os.path.realpath(os.path.join(folder, path[len(MODEL_PATH):]))
    root = os.path.realpath(folder)
    if os.path.commonpath([full, root]) != root:
        raise InputError(f"weight path {path!r} leaves the weights folder {folder}")
    return full


def random_blob_file(path: str, decls: dict[int, tuple[str, tuple]], rng: np.random.Generator) -> bytes:
    """A MILBlob file holding a random tensor at each declared offset (floats ~ N(0, 1/fan_in), integers
    small), written by orion.blob's writer; the program's offsets must be that writer's layout."""
    arrays = []
    for off in sorted(decls):
        dtype, shape = decls[off]
        if dtype not in _NUMPY:
            raise InputError(f"{path} offset {off}: cannot generate {dtype} weights (supported: "
                             f"{', '.join(_NUMPY)})")
        dt = np.dtype(_NUMPY[dtype])
        if dt.kind == "f":
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            arrays.append((rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))).astype(dt))
        else:
            lo = -8 if dt.kind == "i" else 0
            arrays.append(rng.integers(lo, lo + 16, size=shape).astype(dt))
    data, offsets = write_blob_file(arrays)
    if offsets != sorted(decls):
        raise InputError(f"{path}: the program reads tensors at offsets {sorted(decls)}, but a file holding "
                         f"them in that order has them at {offsets}; write this weight file yourself "
                         f"(orion.blob.save_blob_file)")
    return data


def load_weights(parsed: dict, folder: str, random_missing: bool, seed: int) -> tuple[dict[str, bytes], list[str]]:
    """The weight dictionary of a parsed program: only the files it names. Returns it and the paths that
    were filled with random data."""
    weights, missing = {}, []
    refs = blob_refs(parsed)
    for path in refs:
        full = _file_for(path, folder)
        if os.path.isfile(full):
            with open(full, "rb") as f:
                weights[path] = f.read()
        elif os.path.exists(full):
            raise InputError(f"weight file {full} (for {path}) is not a regular file")
        else:
            missing.append(path)
    if missing and not random_missing:
        listing = ", ".join(os.path.join(folder, p[len(MODEL_PATH):]) for p in missing)
        raise ModelFormatError(f"the program names {len(missing)} weight file(s) that do not exist: {listing}; "
                               f"put them there (or pass --weights DIR), or run with --random-weights")
    for i, path in enumerate(sorted(missing)):
        weights[path] = random_blob_file(path, refs[path], np.random.default_rng([seed, 1, i]))
    return weights, sorted(missing)


# ---- inputs ---------------------------------------------------------------------------------------------

def parse_inputs(specs: list[str]) -> dict[str, str]:
    given = {}
    for kv in specs:
        name, sep, file = kv.partition("=")
        if not sep or not name or not file:
            raise UsageError(f"--input {kv!r}: expected NAME=FILE.npy")
        if name in given:
            raise UsageError(f"--input {name} given twice")
        given[name] = file
    return given


def read_input(name: str, file: str, spec) -> np.ndarray:
    try:
        with open(file, "rb") as f:
            magic = f.read(6)
            f.seek(0)
            a = np.load(f, allow_pickle=False) if magic == b"\x93NUMPY" else None
    except FileNotFoundError:
        raise InputError(f"--input {name}={file}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"--input {name}={file}: is a folder, not a .npy file") from None
    except (ValueError, OSError, EOFError) as e:
        raise InputError(f"--input {name}={file}: unreadable .npy file ({e})") from None
    if a is None:
        raise InputError(f"--input {name}={file}: not a .npy file (no \\x93NUMPY header; write it with numpy.save)")
    if tuple(a.shape) != tuple(spec.shape):
        raise InputError(f"--input {name}={file}: shape {list(a.shape)}, the program's input {name} is "
                         f"{spec.dtype}{list(spec.shape)}")
    if a.dtype.kind not in "fiub":
        raise InputError(f"--input {name}={file}: dtype {a.dtype} is not numeric")
    return a.astype(spec.dtype)


# ---- output table ---------------------------------------------------------------------------------------

def output_table(out: dict[str, np.ndarray]) -> str:
    rows = [("output", "shape", "dtype", "min", "max", "mean", "inf", "nan")]
    for name, arr in out.items():
        a = arr.astype(np.float64)
        fin = a[np.isfinite(a)]
        stats = [f"{fin.min():.6g}", f"{fin.max():.6g}", f"{fin.mean():.6g}"] if fin.size else ["-", "-", "-"]
        rows.append((name, "x".join(str(s) for s in arr.shape), str(arr.dtype), *stats,
                     str(int(np.isinf(a).sum())), str(int(np.isnan(a).sum()))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w) if i < 3 else c.rjust(w) for i, (c, w) in
                                       enumerate(zip(r, widths))).rstrip() for r in rows)


def cmd_run(args) -> int:
    from ..native import mil  # start-up: orion.mil loads only for `orion run`

    if os.path.isdir(args.program):
        raise UsageError(f"{args.program} is a folder; give the program's .mil file")
    if not os.path.isfile(args.program):
        raise UsageError(f"{args.program}: no such file")
    if args.weights and not os.path.isdir(args.weights):
        raise UsageError(f"--weights {args.weights}: not a folder")
    given = parse_inputs(args.input)
    if args.out:
        check_writable_target("--out", args.out, folder=False)
    with open(args.program, "rb") as f:
        text = f.read()
    parsed = mil.parse(text)
    folder = args.weights or os.path.dirname(os.path.abspath(args.program))
    weights, filled = load_weights(parsed, folder, args.random_weights, args.seed)
    prog = compile_mil(text, weights, device=args.device, profile=profile(args))
    unknown = set(given) - {s.name for s in prog.inputs}
    if unknown:
        raise UsageError(f"--input names {sorted(unknown)} are not inputs of the program (its inputs: "
                         f"{', '.join(s.name for s in prog.inputs)})")
    rng = np.random.default_rng(args.seed)
    feeds = {}
    for spec in prog.inputs:
        if spec.name in given:
            feeds[spec.name] = read_input(spec.name, given[spec.name], spec)
        else:
            feeds[spec.name] = rng.standard_normal(spec.shape).astype(spec.dtype)
    prog(**feeds)  # warm-up
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = prog(**feeds)
        times.append(time.perf_counter() - t0)
    print(prog)
    if filled:
        print(f"  random weights (seed {args.seed}) for: {', '.join(filled)}")
    print(output_table(out))
    print(f"  eval median {np.median(times) * 1e3:.3f} ms over {args.repeat} runs; modelled ANE time "
          f"{prog.cost.get('est_ms', 0):.3f} ms")
    if args.out:
        buf = io.BytesIO()
        np.savez(buf, **out)
        write_bytes_atomic(args.out, buf.getvalue())
        print(f"  outputs saved to {args.out}")
    return 0
