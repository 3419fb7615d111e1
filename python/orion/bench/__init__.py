"""``orion bench``: the benchmarks behind ``benchmarks/RESULTS.md`` - decode (GPT-2 124M shape vs PyTorch),
one training step (Stories110M shape vs PyTorch) and the simulator GEMM (vs numpy/OpenBLAS) - as one run
that writes JSON and compares with a baseline (:mod:`orion.bench.compare`).

Ours and the comparison side are measured in the same run, alternating where the scripts alternate, so
their ratio is what a noisy machine cannot fake. torch is never a dependency of this package: without it
the PyTorch sides are skipped with a note, and their ratios are absent from the result.

Every figure is a median of repetitions run until its spread (the relative width of the median's 95 %
confidence interval) is within 10 %, or a time cap is spent - then it is marked ``"stable": false``
(:mod:`orion.bench.measure`).

Result schema (``SCHEMA``; /2: spreads are the median's confidence interval, metrics say ``stable``)::

    {"schema": "orion-bench/2", "quick": bool, "created": ISO time, "commit": {"sha", "dirty"},
     "machine": {...}, "benchmarks": {NAME: {"params": {...}, "notes": [...],
         "metrics": {METRIC: {"value", "unit", "better": "higher"|"lower", "spread", "stable", "samples"}}}}}
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import platform
import subprocess
import sys

import numpy as np

from .. import _native
from .._version import __version__
from ..errors import InputError, OrionError
from .measure import TARGET_SPREAD, across_processes, metric, rel_spread  # noqa: F401  (the result's building blocks)

SCHEMA = "orion-bench/2"
BENCHES = ("decode", "train", "gemm")


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def machine_info(with_torch: bool = True) -> dict:
    info = {"platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "load_avg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "orion": __version__, "numpy": np.__version__}
    info.update(isa=_native.kernel_isa(), sim_threads=_native.num_threads())
    info["torch"] = None
    if with_torch:                     # importing torch takes seconds: only when its side runs
        import torch  # optional: torch (not a dependency; seconds to import)
        info.update(torch=torch.__version__, torch_threads=torch.get_num_threads())
    return info


def commit_info() -> dict:
    """The git commit of the orion source this runs from (None outside a checkout)."""
    here = os.path.dirname(os.path.abspath(__file__))

    def git(*args):
        return subprocess.run(["git", "-C", here, *args], capture_output=True, text=True, timeout=10)
    try:
        sha = git("rev-parse", "HEAD")
        if sha.returncode != 0:
            return {"sha": None, "dirty": None}
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return {"sha": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}


def run_one(name: str, quick: bool = False, use_torch: bool = True) -> dict:
    """One benchmark's section of the result, measured in this process."""
    if name == "decode":
        from .decode import run as bench  # start-up: a benchmark's module loads only when it runs
    elif name == "train":
        from .train_step import run as bench  # start-up: a benchmark's module loads only when it runs
    else:
        from .gemm import run as bench  # start-up: a benchmark's module loads only when it runs
    return bench(quick=quick, use_torch=use_torch)


# a fresh interpreter measuring one benchmark: its section as JSON on stdout
_CHILD = ("import json, sys\n"
          "from orion.bench import run_one\n"
          "section = run_one(sys.argv[1], sys.argv[2] == '1', sys.argv[3] == '1')\n"
          "sys.stdout.write('ORION-BENCH ' + json.dumps(section) + '\\n')\n")


def _in_fresh_process(name: str, quick: bool, use_torch: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))   # this process's orion
    p = subprocess.run([sys.executable, "-c", _CHILD, name, str(int(quick)), str(int(use_torch))],
                       capture_output=True, text=True, env=env)
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("ORION-BENCH ")), None)
    if p.returncode != 0 or line is None:
        raise OrionError(f"orion bench: the {name} benchmark's process failed (exit {p.returncode}):\n"
                         f"{p.stderr[-2000:]}")
    return json.loads(line[len("ORION-BENCH "):])


def merge_processes(sections: list[dict], processes: int) -> dict:
    """The sections of one benchmark measured in ``processes`` fresh processes as one (measure.across_processes)."""
    out = {k: v for k, v in sections[0].items() if k not in ("metrics", "notes")}
    out["notes"] = list(dict.fromkeys(n for s in sections for n in s["notes"]))
    out["notes"].append(f"each figure: the median of {processes} fresh processes' medians; its spread also covers "
                        f"the spread between them")
    keys = [k for k in sections[0]["metrics"] if all(k in s["metrics"] for s in sections)]
    out["metrics"] = {k: across_processes([s["metrics"][k] for s in sections]) for k in keys}
    return out


def run(only=BENCHES, quick: bool = False, use_torch: bool = True, log=print, processes: int = 1) -> dict:
    """Runs the benchmarks named in ``only`` and returns the result document (see the module docstring).
    ``quick``: tiny shapes and short time caps (seconds: the machinery, not the performance of real shapes).
    ``processes``: measure each benchmark in that many fresh processes, one after the other, and merge them
    (:func:`merge_processes`); 1: in this process."""
    unknown = [b for b in only if b not in BENCHES]
    if unknown:
        raise InputError(f"unknown benchmark(s) {unknown}: choose from {', '.join(BENCHES)}")
    if isinstance(processes, bool) or not isinstance(processes, int) or not 1 <= processes <= 32:
        raise InputError(f"processes must be an int from 1 to 32, got {processes!r}")
    have_torch = use_torch and torch_available()
    doc = {"schema": SCHEMA, "quick": bool(quick),
           "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit_info(), "machine": machine_info(have_torch), "benchmarks": {}}
    for name in BENCHES:
        if name not in only:
            continue
        log(f"orion bench: {name}{' (quick)' if quick else ''}"
            f"{f' in {processes} fresh processes' if processes > 1 else ''} ...")
        if processes > 1:
            section = merge_processes([_in_fresh_process(name, quick, have_torch) for _ in range(processes)],
                                      processes)
        else:
            section = run_one(name, quick, have_torch)
        if use_torch and not have_torch and name != "gemm":
            section["notes"].append("torch is not installed: the PyTorch side and its ratios were skipped "
                                    "(pip install torch)")
        doc["benchmarks"][name] = section
    return doc
