"""``orion bench``: the benchmarks behind ``benchmarks/RESULTS.md`` - decode (GPT-2 124M shape vs PyTorch),
one training step (Stories110M shape vs PyTorch) and the simulator GEMM (vs numpy/OpenBLAS) - as one run
that writes JSON and compares with a baseline (:mod:`orion.bench.compare`).

Ours and the comparison side are measured in the same run, alternating where the scripts alternate, so
their ratio is what a noisy machine cannot fake. torch is never a dependency of this package: without it
the PyTorch sides are skipped with a note, and their ratios are absent from the result.

Result schema (``SCHEMA``)::

    {"schema": "orion-bench/1", "quick": bool, "created": ISO time, "commit": {"sha", "dirty"},
     "machine": {...}, "benchmarks": {NAME: {"params": {...}, "notes": [...],
         "metrics": {METRIC: {"value", "unit", "better": "higher"|"lower", "spread", "samples"}}}}}
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess

SCHEMA = "orion-bench/1"
BENCHES = ("decode", "train", "gemm")


def metric(value: float, unit: str, better: str, samples=(), spread: float | None = None) -> dict:
    """One number of a result. ``samples`` are the repetitions it came from; ``spread`` (relative) defaults
    to theirs."""
    samples = [float(s) for s in samples]
    if spread is None:
        spread = rel_spread(samples)
    return {"value": float(value), "unit": unit, "better": better, "spread": float(spread), "samples": samples}


def rel_spread(samples) -> float:
    """How much repetitions of one measurement disagree, relative to their median: the interquartile range
    for four samples or more (one stalled repetition on a shared machine does not make every later change
    "noise"), the full range below that; 0 for fewer than two."""
    if len(samples) < 2:
        return 0.0
    med = statistics.median(samples)
    if med <= 0:
        return 0.0
    if len(samples) >= 4:
        q1, _, q3 = statistics.quantiles(samples, n=4)
        return (q3 - q1) / med
    return (max(samples) - min(samples)) / med


def torch_available() -> bool:
    import importlib.util
    return importlib.util.find_spec("torch") is not None


def machine_info(with_torch: bool = True) -> dict:
    import numpy as np

    from .. import __version__, _native
    info = {"platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "load_avg_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "orion": __version__, "numpy": np.__version__}
    info.update(isa=_native.kernel_isa(), sim_threads=_native.num_threads())
    info["torch"] = None
    if with_torch:                     # importing torch takes seconds: only when its side runs
        import torch
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
    ``quick``: tiny shapes and few repetitions (seconds; checks the machinery, not the performance)."""
    from ..errors import InputError
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
            from .decode import run as bench
        elif name == "train":
            from .train_step import run as bench
        else:
            from .gemm import run as bench
        section = bench(quick=quick, use_torch=have_torch)
        if use_torch and not have_torch and name != "gemm":
            section["notes"].append("torch is not installed: the PyTorch side and its ratios were skipped "
                                    "(pip install torch)")
        doc["benchmarks"][name] = section
    return doc
