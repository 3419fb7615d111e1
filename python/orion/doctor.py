"""``orion doctor``: which weight-update strategies really work on this machine.

Weights are baked into a compiled ANE program (C07), so training needs a way to get new weights onto
the device (the four strategies are described in :mod:`orion.weight_updates`).
The upstream evidence for the two "delta" recipes is contradictory, so the runtime only uses what this
machine verified.

``orion.doctor()`` runs :func:`orion.weight_updates.probe` for every strategy - the same update code
training runs - which compares the updated program's output with a fresh compile of the new weights on
the same device (and with the simulator). It prints a table and caches the verdicts per OS build and
chip under ``~/.cache/orion`` (``$ORION_CACHE_DIR`` overrides). On the simulator the verdicts follow the
profile: the hardware-faithful one by default, the Orion paper's claims under ``Profile(delta="paper")``.

``orion.doctor.allowed_strategies()`` applies the rule: never a strategy that failed verification; a
delta strategy only if it verified correct, cheaper than recompile and budget-free; fallback order
dynamic -> recompile, announced in one log line. ``verified_delta()`` is what training asks.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import logging
import os
import re
import sys
import types

import numpy as np

from . import weight_updates
from .errors import OrionError
from .fileio import atomic_write

log = logging.getLogger("orion")

STRATEGIES = weight_updates.STRATEGIES
DELTAS = weight_updates.DELTAS
CACHE_VERSION = 2  # 2: results from orion.weight_updates.probe (budget from the update's own report)


# ---- the ANE backend's diagnostics hook ---------------------------------------------------------

def ane_control(command: str) -> dict | None:
    """Sends ``command`` to the ANE backend's hook (src/orion_native/ane/ane_api.h); None when this
    orion was built without the ANE backend. Commands: info, route=inmemory|client, entry=two|one,
    shutdown."""
    from . import _native

    try:
        fn = ctypes.CDLL(_native.__file__).orion_ane_control
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = [ctypes.c_char_p]
    return json.loads(fn(command.encode()).decode())


def device_info() -> list[dict]:
    """``orion.devices()`` plus, for the ANE, its capability record: ANE sub-type/generation, OS build,
    chip, MIL dialect to target, compile budget, and the reason when unavailable."""
    from . import _native
    from .runtime import devices

    out = []
    for d in devices():
        d = dict(d)
        used, limit = _native.budget(d["name"])
        d["compile_budget"] = {"used": int(used), "limit": int(limit)}
        if d["name"] == "ane":
            info = ane_control("info") or {}
            d.update(fake=info.get("fake", False), framework=info.get("framework"), route=info.get("route"),
                     routes=info.get("routes"), **{k: v for k, v in (info.get("device") or {}).items()})
        out.append(d)
    return out


# ---- machine identity and the verdict cache ----------------------------------------------------

def _resolve(device: str) -> str:
    from .runtime import resolve_device

    return resolve_device(device)


def machine(device: str = "auto", profile=None) -> dict:
    """What a verdict is valid for: the device and, for the ANE, OS build and chip; for the simulator
    the profile's chip and delta behaviour (``profile``, default the current default profile)."""
    from .sim import get_profile

    dev = _resolve(device)
    if dev == "sim":
        p = profile or get_profile()
        return {"device": "sim", "os_build": "simulator", "chip": f"profile {p.chip}",
                "ane": p.chip + ("-paper" if p.delta == "paper" else ""), "fake": False}
    info = ane_control("info") or {}
    d = info.get("device", {})
    return {"device": "ane", "os_build": d.get("os_build") or "unknown", "chip": d.get("chip") or "unknown",
            "ane": d.get("architecture") or d.get("subtype") or "unknown", "fake": bool(info.get("fake"))}


def cache_dir() -> str:
    root = os.environ.get("ORION_CACHE_DIR")
    if not root:
        root = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "orion")
    return root


def cache_path(m: dict) -> str:
    key = f"{m['device']}-{m['os_build']}-{m['chip']}-{m['ane']}" + ("-fake" if m.get("fake") else "")
    return os.path.join(cache_dir(), "doctor-" + re.sub(r"[^A-Za-z0-9._-]+", "_", key) + ".json")


def _write_atomic(path: str, data: dict) -> None:
    with atomic_write(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def cached_verdict(device: str = "auto", profile=None) -> dict | None:
    """The cached verdict for this machine, or None (missing, unreadable or from another version)."""
    from .fileio import read_json
    path = cache_path(machine(device, profile))
    try:
        v = read_json(path, OrionError, max_bytes=1 << 20)
    except OrionError:                        # missing, unreadable, corrupt: as if there were none
        return None
    return v if isinstance(v, dict) and v.get("version") == CACHE_VERSION else None


# ---- the probes ----------------------------------------------------------------------------------

def _probe_routes() -> dict:
    """Hello-world on each route of the ANE backend (the direct _ANEClient route is experimental)."""
    from .runtime import compile_mil

    info = ane_control("info") or {}
    before = info.get("route", "inmemory")
    C, S = weight_updates.C, weight_updates.S
    t = f"tensor<fp16, [1, {C}, 1, {S}]>"
    mil = (weight_updates.HEADER + f"    func main<ios18>({t} a, {t} b) {{\n"
           f'        {t} z = add(x = a, y = b)[name = string("z")];\n    }} -> (z);\n}}\n')
    rng = np.random.default_rng(7)
    a, b = (rng.standard_normal((1, C, 1, S)).astype(np.float16) for _ in range(2))
    out = {}
    for i, route in enumerate(("inmemory", "client")):
        answer = ane_control(f"route={route}") or {}
        if "error" in answer:
            out[route] = {"verdict": "unavailable", "error": answer["error"]}
            continue
        try:
            # Route-specific trailing newlines: a text of its own, so no cache shares a model across routes.
            with compile_mil(mil + "\n" * (3 + i), device="ane") as p:
                z = p(a=a, b=b)["z"]
            ok = weight_updates.outputs_match(z, (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16))
            out[route] = {"verdict": "works" if ok else "wrong", "error": None}
        except OrionError as e:
            out[route] = {"verdict": "error", "error": f"{type(e).__name__}: {e}"}
    ane_control(f"route={before}")
    return out


def run(device: str = "auto", *, profile=None, out=None, write_cache: bool = True, seed: int = 20240917) -> dict:
    """Runs :func:`orion.weight_updates.probe` for every strategy on ``device`` (under ``profile``),
    prints the table to ``out`` (default stdout; False to stay quiet), caches and returns the verdict."""
    dev = _resolve(device)
    m = machine(dev, profile)
    results = {s: weight_updates.probe(s, dev, profile, seed=seed + 10 * i) for i, s in enumerate(STRATEGIES)}
    verdict = {"version": CACHE_VERSION, "machine": m, "when": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "orion": _version(), "results": results,
               "routes": _probe_routes() if dev == "ane" else None}
    verdict["allowed"] = _allowed(verdict)
    if write_cache:
        _write_atomic(cache_path(m), verdict)
    if out is not False:
        print_table(verdict, out or sys.stdout)
    return verdict


def _version() -> str:
    from . import __version__

    return __version__


def print_table(verdict: dict, out=None) -> None:
    out = out or sys.stdout
    m = verdict["machine"]
    if m["device"] == "sim":
        head = f"orion doctor: simulator ({m['chip']}), hardware-faithful verdicts"
    else:
        head = (f"orion doctor: ANE {m['ane']} on {m['chip']}, OS build {m['os_build']}"
                + (" [FAKE framework: contract test only]" if m.get("fake") else ""))
    print(head, file=out)
    print(f"  {'strategy':<13} {'verdict':<10} {'ms':>9}  {'budget used':>11}  {'= fresh':>7}  {'= sim':>5}", file=out)
    for s in STRATEGIES:
        r = verdict["results"][s]
        ms = "-" if r.get("ms") is None else f"{r['ms']:.2f}"
        bu = "-" if r.get("budget_used") is None else str(r["budget_used"])
        if r.get("unverified_loads"):
            bu += "?"
        yn = {True: "yes", False: "no"}
        print(f"  {s:<13} {r['verdict']:<10} {ms:>9}  {bu:>11}  {yn[bool(r.get('matches_fresh'))]:>7}  "
              f"{yn[bool(r.get('matches_sim'))]:>5}", file=out)
        if r.get("error"):  # in full: the exact call, its arguments' shapes and the NSError
            print(f"      {r['error']}", file=out)
    if verdict.get("routes"):
        print("  routes: " + ", ".join(f"{k} {v['verdict']}" for k, v in verdict["routes"].items()), file=out)
        for k, v in verdict["routes"].items():
            if v.get("error"):
                print(f"      {k}: {v['error']}", file=out)
    print("  allowed: " + " -> ".join(verdict["allowed"]), file=out)


# ---- the rule --------------------------------------------------------------------------------------

def _allowed(verdict: dict | None) -> list[str]:
    if verdict is None:
        return ["dynamic", "recompile"]  # proven upstream; the delta recipes need this machine's verdict
    r = verdict["results"]
    ok = {s for s in STRATEGIES if r.get(s, {}).get("verdict") == "works"}
    rec_ms = r.get("recompile", {}).get("ms")
    deltas = [s for s in DELTAS if s in ok and r[s].get("budget_free") and r[s].get("ms") is not None
              and rec_ms is not None and r[s]["ms"] < rec_ms]
    return [s for s in ("dynamic",) if s in ok] + deltas + [s for s in ("recompile",) if s in ok]


def _why_not(verdict: dict | None, s: str) -> str:
    if verdict is None:
        return "not verified (run `orion doctor`)"
    r = verdict["results"].get(s, {})
    v = r.get("verdict")
    if v != "works":
        return v or "not probed"
    if not r.get("budget_free"):
        return "charges the compile budget"
    return "not cheaper than recompile"


def _same_machine(a: dict | None, b: dict) -> bool:
    keys = ("device", "os_build", "chip", "ane", "fake")
    return isinstance(a, dict) and all(a.get(k) == b.get(k) for k in keys)


def verified_delta(device: str = "auto", profile=None, verdict: dict | None = None) -> tuple[str | None, str]:
    """(the delta strategy training may use here, "") or (None, why not). Only with a verdict for this
    machine (``verdict`` or the cached one) in which the probe verified it and the rule allows it."""
    m = machine(device, profile)
    if verdict is None:
        verdict = cached_verdict(device, profile)
    if verdict is None:
        return None, "no cached `orion doctor` verdict for this machine"
    if not _same_machine(verdict.get("machine"), m):
        got = verdict.get("machine") or {}
        return None, (f"the `orion doctor` verdict is for {got.get('device')} {got.get('chip')} "
                      f"({got.get('os_build')}, {got.get('ane')}), not for this machine ({m['device']} {m['chip']}, "
                      f"{m['os_build']}, {m['ane']})")
    allowed = _allowed(verdict)
    for s in DELTAS:
        if s in allowed:
            return s, ""
    return None, f"`orion doctor` did not verify a delta update here (allowed: {', '.join(allowed) or 'none'})"


_announced: set = set()


def allowed_strategies(device: str = "auto", verdict: dict | None = None, *, announce: bool = True,
                       profile=None) -> list[str]:
    """Weight-update strategies the runtime may use on this machine, in order of preference.

    Uses ``verdict`` or this machine's cached ``orion doctor`` verdict. Never a strategy that failed
    verification; ``delta_*`` only when verified correct, cheaper than recompile and budget-free;
    without a verdict, the upstream-proven dynamic -> recompile. Announced once in one log line.
    """
    if verdict is None:
        verdict = cached_verdict(device, profile)
    allowed = _allowed(verdict)
    m = verdict["machine"] if verdict else machine(device, profile)
    key = (cache_path(m), tuple(allowed))
    if announce and key not in _announced:
        _announced.add(key)
        skipped = "; ".join(f"{s}: {_why_not(verdict, s)}" for s in STRATEGIES if s not in allowed)
        log.info("orion: weight updates use %s%s", " -> ".join(allowed) or "nothing (no strategy verified)",
                 f" ({skipped})" if skipped else "")
    return allowed


# ``orion.doctor()`` runs the probes; the module's other functions stay reachable as attributes.
class _CallableModule(types.ModuleType):
    def __call__(self, device: str = "auto", **kw) -> dict:
        return run(device, **kw)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["run", "allowed_strategies", "verified_delta", "cached_verdict", "machine", "device_info", "ane_control",
           "print_table", "STRATEGIES"]

