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
import os
import platform
import subprocess

import numpy as np

from .. import _native
from .._version import __version__
from ..errors import InputError
from .measure import TARGET_SPREAD, metric, rel_spread  # noqa: F401  (the result's building blocks)

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


def run(only=BENCHES, quick: bool = False, use_torch: bool = True, log=print) -> dict:
    """Runs the benchmarks named in ``only`` and returns the result document (see the module docstring).
    ``quick``: tiny shapes and short time caps (seconds: the machinery, not the performance of real shapes)."""
    unknown = [b for b in only if b not in BENCHES]
    if unknown:
        raise InputError(f"unknown benchmark(s) {unknown}: choose from {', '.join(BENCHES)}")
    have_torch = use_torch and torch_available()
    doc = {"schema": SCHEMA, "quick": bool(quick),
           "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit_info(), "machine": machine_info(have_torch), "benchmarks": {}}
    for name in BENCHES:
        if name not in only:
            continue
        log(f"orion bench: {name}{' (quick)' if quick else ''} ...")
        if name == "decode":
            from .decode import run as bench  # start-up: a benchmark's module loads only when it runs
        elif name == "train":
            from .train_step import run as bench  # start-up: a benchmark's module loads only when it runs
        else:
            from .gemm import run as bench  # start-up: a benchmark's module loads only when it runs
        section = bench(quick=quick, use_torch=have_torch)
        if use_torch and not have_torch and name != "gemm":
            section["notes"].append("torch is not installed: the PyTorch side and its ratios were skipped "
                                    "(pip install torch)")
        doc["benchmarks"][name] = section
    return doc
