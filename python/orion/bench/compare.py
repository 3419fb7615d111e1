"""``orion bench --compare BASELINE.json``: which metrics regressed beyond noise.

Noise, defined: each figure carries its spread - the relative width of its median's ~95 % confidence
interval (:mod:`orion.bench.measure`), taken as ``value * (1 -+ spread / 2)``. A metric changed when the two
runs' intervals do not overlap **and** it moved by more than ``NOISE_FLOOR`` (a shared machine moves whole
runs by that much, which no within-run spread sees). It regressed when that change is against its
direction (``better``: "higher" or "lower"). Changes read as speed: ``+25 % (1.25x faster)``,
``-62.3 % (2.65x slower)`` - negative is slower whether the unit is seconds (lower is better) or tok/s.
The ratios against the comparison side (PyTorch, numpy) are measured in the same run, so machine load
mostly cancels in them: they are the headline numbers and the ones worth gating on. So where a benchmark has
such ratios in both runs and none of them regressed, its absolute figures that got slower are reported as
``machine`` (the comparison side, measured alongside, slowed alike: a shared machine slowing a whole run, seen
at 40 % on a 2-core VM) rather than as regressions; without a comparison side (no torch) they gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import InputError

NOISE_FLOOR = 0.10
RATIO_UNIT = "x"        # a same-run ratio against the comparison side (measure.ratio)


@dataclass
class Finding:
    bench: str
    metric: str
    unit: str
    old: float
    new: float
    old_spread: float
    new_spread: float
    speed: float         # new speed / old speed, whatever the unit's direction: 0.5 = twice as slow
    floor: float
    verdict: str         # "regression" | "improvement" | "within noise" | "machine" (see the module docstring)
    unstable: tuple = ()  # which runs could not hold this figure's spread ("baseline", "this run")

    @property
    def change(self) -> float:
        """Relative change in speed: +0.25 = 25 % faster, negative = slower."""
        return self.speed - 1.0

    def line(self) -> str:
        word, factor = ("faster", self.speed) if self.speed >= 1 else ("slower", 1 / self.speed)
        text = (f"{self.verdict:12s} {self.bench}.{self.metric}: {self.old:.4g} -> {self.new:.4g} {self.unit}, "
                f"{self.change:+.1%} ({factor:.2f}x {word}); spread {self.old_spread:.0%} -> {self.new_spread:.0%}, "
                f"floor {self.floor:.0%}")
        if self.unstable:
            text += f"; unstable in {' and '.join(self.unstable)}"
        return text


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
    if not isinstance(m.get("stable", True), bool):
        raise InputError(f"{where}.stable must be true or false, got {m.get('stable')!r:.60}")
    if not isinstance(m.get("unit", ""), str):
        raise InputError(f"{where}.unit must be a string, got {m.get('unit')!r:.60}")


def _interval(m) -> tuple[float, float]:
    half = float(m.get("spread") or 0.0) / 2
    return m["value"] * (1 - half), m["value"] * (1 + half)


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
            speed = m["value"] / o["value"] if higher else o["value"] / m["value"]
            (new_lo, new_hi), (old_lo, old_hi) = _interval(m), _interval(o)
            apart = new_hi < old_lo or new_lo > old_hi
            verdict = "within noise"
            if apart and speed - 1.0 < -floor:
                verdict = "regression"
            elif apart and speed - 1.0 > floor:
                verdict = "improvement"
            unstable = tuple(who for who, x in (("baseline", o), ("this run", m)) if x.get("stable") is False)
            out.append(Finding(bench, name, str(m.get("unit", "")), float(o["value"]), float(m["value"]),
                               float(o.get("spread") or 0.0), float(m.get("spread") or 0.0), speed, floor, verdict,
                               unstable))
    for bench in {f.bench for f in out}:
        mine = [f for f in out if f.bench == bench]
        ratios = [f for f in mine if f.unit == RATIO_UNIT]
        if ratios and not any(f.verdict == "regression" for f in ratios):
            for f in mine:
                if f.unit != RATIO_UNIT and f.verdict == "regression":
                    f.verdict = "machine"
    return out


def _usable(m) -> bool:
    return 0 < m["value"] < math.inf         # a failed measurement (0, NaN, inf) has no ratio
