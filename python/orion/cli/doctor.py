"""``orion doctor`` (and ``orion.doctor()`` in Python): which weight-update strategies really work on this machine.

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

import datetime
import json
import sys
import types

import numpy as np

from .. import _native
from .._version import __version__
from ..errors import OrionError
from ..fileio import atomic_write
from ..native import weight_updates
from ..native.runtime import ane_control, compile_mil, devices, resolve_device  # noqa: F401  (ane_control: re-exported)
# The verdict cache and the rule live with the strategies (training asks them too); doctor re-exports them.
from ..native.weight_updates import (CACHE_VERSION, DELTAS, STRATEGIES, allowed_strategies, cache_dir,  # noqa: F401
                                     cache_path, cached_verdict, machine, verdict_allowed, verified_delta)
from .common import DEVICES


# ---- the command: its parser and cmd_doctor (the functions below are also orion.doctor's Python API) ----------

def add_doctor_parser(subparsers) -> None:
    d = subparsers.add_parser("doctor", help="verify the weight-update strategies on this machine")
    d.add_argument("--device", default="auto", choices=DEVICES, help="the device to verify")
    d.add_argument("--cached", action="store_true", help="print the cached verdict instead of probing")
    d.add_argument("--json", action="store_true", help="print the verdict as JSON")
    d.add_argument("--no-cache", action="store_true", help="do not write the verdict cache")
    d.add_argument("--devices", action="store_true", help="list the devices with their capability records")
    d.set_defaults(func=cmd_doctor)


def cmd_doctor(args) -> int:
    if getattr(args, "devices", False):
        print(json.dumps(device_info(), indent=1))
        return 0
    if args.cached:
        v = cached_verdict(args.device)
        if v is None:
            print(f"orion doctor: no cached verdict for this machine ({cache_path(machine(args.device))})")
            return 1
    else:
        v = run(args.device, out=False, write_cache=not args.no_cache)
    if args.json:
        print(json.dumps(v, indent=1, sort_keys=True))
    else:
        print_table(v)
    return 0 if v["allowed"] else 1


# ---- what orion.devices() says, with the ANE's capability record ------------------------------------

def device_info() -> list[dict]:
    """``orion.devices()`` plus, for the ANE, its capability record: ANE sub-type/generation, OS build,
    chip, MIL dialect to target, compile budget, and the reason when unavailable."""
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


# ---- the probes ----------------------------------------------------------------------------------

def _probe_routes() -> dict:
    """Hello-world on each route of the ANE backend (the direct _ANEClient route is experimental)."""
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
    dev = resolve_device(device)
    m = machine(dev, profile)
    results = {s: weight_updates.probe(s, dev, profile, seed=seed + 10 * i) for i, s in enumerate(STRATEGIES)}
    verdict = {"version": CACHE_VERSION, "machine": m, "when": datetime.datetime.now(datetime.timezone.utc).isoformat(),
               "orion": __version__, "results": results,
               "routes": _probe_routes() if dev == "ane" else None}
    verdict["allowed"] = verdict_allowed(verdict)
    if write_cache:
        _write_atomic(cache_path(m), verdict)
    if out is not False:
        print_table(verdict, out or sys.stdout)
    return verdict


def _write_atomic(path: str, data: dict) -> None:
    with atomic_write(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


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


# ``orion.doctor()`` runs the probes; the module's other functions stay reachable as attributes.
class _CallableModule(types.ModuleType):
    def __call__(self, device: str = "auto", **kw) -> dict:
        return run(device, **kw)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["run", "allowed_strategies", "verified_delta", "cached_verdict", "machine", "device_info", "ane_control",
           "print_table", "STRATEGIES"]

