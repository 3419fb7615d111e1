"""``orion bench --compare BASELINE.json``: which metrics regressed beyond noise.

Noise, defined: a metric moved against its direction ("higher" or "lower" is better) by more than
``max(NOISE_FLOOR, spread of this run, spread of the baseline)``, where a metric's spread is the relative
run-to-run spread measured while it was taken (:func:`orion.bench.rel_spread` of its repetitions: the
interquartile range over the median, the full range for fewer than four; for a ratio of two sides, the
sum of both sides' spreads). A shared machine easily moves single numbers by 10 %, hence
the floor; a metric whose repetitions already disagree by more than that needs a larger move to count.
The ratios against the comparison side (PyTorch, numpy) are measured in the same run, so machine load
cancels in them: they are the headline numbers and the ones worth gating on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import InputError

NOISE_FLOOR = 0.10


@dataclass
class Finding:
    bench: str
    metric: str
    old: float
    new: float
    change: float        # relative change in the metric's good direction: +0.2 = 20 % better
    noise: float         # the threshold it was judged against
    verdict: str         # "regression" | "improvement" | "within noise"

    def line(self) -> str:
        return (f"{self.verdict:12s} {self.bench}.{self.metric}: {self.old:.4g} -> {self.new:.4g} "
                f"({self.change:+.1%}, noise {self.noise:.0%})")


def check_result(doc, what: str) -> dict:
    """The ``benchmarks`` of a result document, after checking every part :func:`compare` reads has the
    type the schema gives it (a baseline is checked this way before the benchmarks run, so a bad file
    fails in a second, not after the run); ``what`` names the document in the errors."""
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), dict):
        raise InputError(f"{what}: not an orion bench result (no 'benchmarks' object); write one with "
                         f"`orion bench --json FILE`")
    if "quick" in doc and not isinstance(doc["quick"], bool):
        raise InputError(f"{what}: 'quick' must be true or false, got {doc['quick']!r}")
    for bench, section in doc["benchmarks"].items():
        where = f"{what}: benchmarks.{bench}"
        if not isinstance(section, dict):
            raise InputError(f"{where} must be an object, got {type(section).__name__}")
        metrics = section.get("metrics")
        if metrics is None:
            continue
        if not isinstance(metrics, dict):
            raise InputError(f"{where}.metrics must be an object metric -> {{value, unit, better, spread}}, got "
                             f"{type(metrics).__name__}")
        for name, m in metrics.items():
            _check_metric(m, f"{where}.metrics.{name}")
    return doc["benchmarks"]


def _real(v) -> bool:
    """A JSON number Python can divide (not a bool; an integer within float range)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        float(v)
    except OverflowError:
        return False
    return True


def _check_metric(m, where: str) -> None:
    if not isinstance(m, dict):
        raise InputError(f"{where} must be an object {{value, unit, better, spread}}, got {type(m).__name__}")
    if not _real(m.get("value")):
        raise InputError(f"{where}.value must be a number, got {m.get('value')!r:.60}")
    if m.get("better", "higher") not in ("higher", "lower"):
        raise InputError(f"{where}.better must be 'higher' or 'lower', got {m.get('better')!r:.60}")
    spread = m.get("spread")
    if spread is not None and not (_real(spread) and 0 <= spread < math.inf):
        raise InputError(f"{where}.spread must be a finite number >= 0, got {spread!r:.60}")


def compare(result: dict, baseline: dict, floor: float = NOISE_FLOOR) -> list[Finding]:
    """Every metric present in both, judged as the module docstring says (metrics only one side has are
    skipped: a benchmark not run, or torch absent on one machine)."""
    new_b, old_b = check_result(result, "result"), check_result(baseline, "baseline")
    out = []
    for bench, section in new_b.items():
        old_metrics = (old_b.get(bench) or {}).get("metrics") or {}
        for name, m in (section.get("metrics") or {}).items():
            o = old_metrics.get(name)
            if not o or not _usable(m) or not _usable(o):
                continue
            higher = m.get("better", "higher") == "higher"
            ratio = m["value"] / o["value"] if higher else o["value"] / m["value"]
            change = ratio - 1.0
            noise = max(floor, float(m.get("spread") or 0.0), float(o.get("spread") or 0.0))
            verdict = "regression" if change < -noise else "improvement" if change > noise else "within noise"
            out.append(Finding(bench, name, float(o["value"]), float(m["value"]), change, noise, verdict))
    return out


def _usable(m) -> bool:
    return 0 < m["value"] < math.inf         # a failed measurement (0, NaN, inf) has no ratio
