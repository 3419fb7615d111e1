"""Simulator settings and introspection: chip profile, strictness, constraint and op catalogs, budget.

The simulator reproduces the documented ANE behaviour: the constraint catalog of :func:`constraints`.
Contested and chip-specific rules follow a :class:`Profile`; the default (m4, strict) rejects every
disputed pattern, so what passes the simulator should run on every reported chip.
"""

from __future__ import annotations

import contextlib
import functools
import os
from dataclasses import dataclass, replace

from .. import _native
from ..errors import InputError

# Shared with the native core, defined once there (common/profile.h).
_DEFAULTS = _native.sim_defaults()
CHIPS = tuple(_DEFAULTS["chips"])
LEGACY_CHIPS = tuple(_DEFAULTS["legacy_chips"])          # C29: the ios16 dialect
MIN_SURFACE_BYTES = int(_DEFAULTS["min_surface_bytes"])  # C04
COMPILE_BUDGET = int(_DEFAULTS["compile_budget"])        # C05


@functools.lru_cache(maxsize=None)
def catalog_limits(chip: str | None = None) -> dict[str, int]:
    """The numbers the simulator's constraint checks use for ``chip`` (default: the default chip), by name
    (e.g. ``max_axis``, ``max_weight_tensors``): the compiler's defaults and validation read them here."""
    out: dict[str, int] = {}
    for c in _native.sim_constraints(chip or _DEFAULTS["default_chip"], "strict"):
        out.update(c["limits"])
    return out


def dialect_for(chip: str | None) -> str:
    """The MIL dialect the ANE compiler of ``chip`` takes (C29: the legacy spelling on M1/M2)."""
    return "ios16" if chip in LEGACY_CHIPS else "ios18"


@dataclass(frozen=True)
class Profile:
    """What the simulator reproduces.

    chip: m1..m5 (chip-specific constraints C24, C28-C32, C35).
    strictness: "strict" rejects the contested patterns (``confidence`` "[X]" in :func:`constraints`);
        "permissive" allows them.
    delta: what the simulated device does with the delta recipes: "hardware" (a reload never picks up
        rewritten weight files, as measured on M4/M5, C07; a delta patch is a charged hidden compile) or
        "paper" (the reload does and the patch is free, as the Orion paper claims). A simulator setting:
        on the ANE backend the recipes run on the device, whatever the profile says.
    min_surface_bytes: smallest surface the hardware evaluates (C04).
    compile_budget: compiles per process before BudgetExceeded (C05).
    """

    chip: str = _DEFAULTS["default_chip"]
    strictness: str = "strict"
    delta: str = "hardware"
    min_surface_bytes: int = MIN_SURFACE_BYTES
    compile_budget: int = COMPILE_BUDGET

    def __post_init__(self):
        if self.chip not in CHIPS:
            raise InputError(f"unknown chip {self.chip!r}: use one of {', '.join(CHIPS)}")
        if self.strictness not in ("strict", "permissive"):
            raise InputError(f"unknown strictness {self.strictness!r}: use 'strict' or 'permissive'")
        if self.delta not in ("hardware", "paper"):
            raise InputError(f"unknown delta behaviour {self.delta!r}: use 'hardware' or 'paper'")
        if int(self.min_surface_bytes) < 1 or int(self.compile_budget) < 0:
            raise InputError("min_surface_bytes must be >= 1 and compile_budget >= 0")

    @property
    def dialect(self) -> str:
        """MIL dialect the compiler targets for this chip (C29: legacy spelling on M1/M2)."""
        return dialect_for(self.chip)

    def native_args(self) -> dict:
        return dict(chip=self.chip, strictness=self.strictness, delta=self.delta,
                    min_surface_bytes=int(self.min_surface_bytes), compile_budget=int(self.compile_budget))


def _profile_from_env() -> Profile:
    return Profile(chip=os.environ.get("ORION_SIM_CHIP", "m4"),
                   strictness=os.environ.get("ORION_SIM_STRICTNESS", "strict"))


_profile = _profile_from_env()


def get_profile() -> Profile:
    """The default profile used by compiles that do not pass one."""
    return _profile


def set_profile(profile: Profile | None = None, **changes) -> Profile:
    """Sets the default profile (``set_profile(chip="m1")`` changes single fields); returns the old one."""
    global _profile
    old = _profile
    _profile = replace(profile or _profile, **changes)
    return old


def constraints(profile: Profile | None = None) -> list[dict]:
    """Every emulated ANE constraint (C01..C47) with its reaction under ``profile`` and ``limits``, the
    numbers its check uses (e.g. C24 ``{"max_kernel_width": 15}``; the compiler's validation reads them)."""
    p = profile or _profile
    return list(_native.sim_constraints(p.chip, p.strictness))


def ops(profile: Profile | None = None) -> list[dict]:
    """The op schema: every MIL op the simulator knows — ``name``, ``family``, ``params`` (required first,
    "?" = optional), ``types``, ``output`` rule, ANE ``evidence``, ``constraints``, the compiler's
    ``lowering`` — and its ``status`` under ``profile``. ``orion.ops.schema()`` adds the graph builders."""
    p = profile or _profile
    return list(_native.sim_ops(p.chip, p.strictness))


def compile_budget() -> tuple[int, int]:
    """(compiles used, limit) of the simulator's per-process budget (C05)."""
    return tuple(_native.budget("sim"))


def reset_compile_budget() -> None:
    """Simulator only: starts the emulated per-process budget again (the hardware's never resets)."""
    _native.reset_budget("sim")


def set_compile_budget(limit: int) -> None:
    """Overrides the budget limit for the simulator (default: the profile's, :data:`COMPILE_BUDGET`)."""
    _native.set_budget_limit("sim", int(limit))


@dataclass
class StepTimes:
    """What :func:`timing` measured: per simulated step (``op``, ``step`` - its MIL name, shared by every
    program with that name), the calls, wall seconds, and the step's flops and bytes read + written as the
    cost model counts them (for the whole step: a step computing only live columns does a part)."""

    rows: list

    def by_op(self) -> list[dict]:
        """Totals per op type, most time first."""
        acc: dict[str, dict] = {}
        for r in self.rows:
            a = acc.setdefault(r["op"], {"op": r["op"], "calls": 0, "seconds": 0.0, "flops": 0.0, "bytes": 0.0})
            for k in ("calls", "seconds", "flops", "bytes"):
                a[k] += r[k]
        return sorted(acc.values(), key=lambda a: -a["seconds"])

    @property
    def seconds(self) -> float:
        return sum(r["seconds"] for r in self.rows)

    def table(self, top: int = 15) -> str:
        """The ops taking the most time: calls, ms, share, GFLOP/s and GB/s (as the cost model counts)."""
        total = self.seconds or 1.0
        lines = [f"{'op':<22}{'calls':>8}{'ms':>10}{'share':>8}{'GFLOP/s':>10}{'GB/s':>8}"]
        for a in self.by_op()[:top]:
            s = a["seconds"] or 1e-12
            lines.append(f"{a['op']:<22}{a['calls']:>8}{a['seconds'] * 1e3:>10.2f}{a['seconds'] / total:>8.1%}"
                         f"{a['flops'] / s / 1e9:>10.1f}{a['bytes'] / s / 1e9:>8.1f}")
        return "\n".join(lines)


@contextlib.contextmanager
def timing():
    """Times every step of every simulated eval inside the block (process-wide, all threads)::

        with orion.sim.timing() as t:
            model.generate("Once upon a time", max_tokens=32)
        print(t.table())

    ``t`` (a :class:`StepTimes`) is filled when the block ends. Timing costs two clock reads per step."""
    out = StepTimes([])
    _native.sim_step_profiling(True)
    try:
        yield out
    finally:
        _native.sim_step_profiling(False)
        out.rows = [dict(op=op, step=name, calls=int(c), seconds=float(sec), flops=float(fl), bytes=float(by))
                    for op, name, c, sec, fl, by in _native.sim_step_profile()]
