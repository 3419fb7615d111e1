"""``orion doctor``: which weight-update strategies really work on this machine.

Weights are baked into a compiled ANE program (C07), so training needs a way to get new weights onto
the device (training-on-ane.md §1). Four strategies exist; the upstream evidence for the two "delta"
recipes is contradictory, so the runtime only uses what this machine verified:

* ``dynamic``      weights are program inputs, written into their surfaces (``Program.stage``)
* ``recompile``    a new program from the new weight bytes (charges the compile budget, C05)
* ``delta_reload`` rewrite the weight files, unload and load the same model (reference W1/W2)
* ``delta_patch``  a new descriptor with the new weights, loaded without an explicit compile (W4)

``orion.doctor()`` compiles a two-weight program with weights A, applies each strategy to reach weights
B, and compares the result with a fresh compile of B on the same device and with the simulator. It
measures the update's milliseconds and the compile budget it used, prints a table, and caches the
verdict per OS build and chip under ``~/.cache/orion`` (``$ORION_CACHE_DIR`` overrides). On the
simulator it runs the same probes and reports the hardware-faithful verdicts.

``orion.doctor.allowed_strategies()`` applies the rule: never a strategy that failed verification; a
delta strategy only if it verified correct, cheaper than recompile and budget-free; fallback order
dynamic -> recompile, announced in one log line.
"""

from __future__ import annotations

import ctypes
import datetime
import json
import logging
import os
import re
import sys
import time
import types
import warnings

import numpy as np

from .fileio import atomic_write

from .errors import AneSimWarning, OrionError

log = logging.getLogger("orion")

STRATEGIES = ("dynamic", "recompile", "delta_reload", "delta_patch")
DELTAS = ("delta_patch", "delta_reload")
CACHE_VERSION = 1

# The probe program: y = W2 (W1 x), two weight files (so a recipe that only handles one file, or the
# framework's single "data" file, shows up), fp16, every surface exactly 49,152 bytes (C04).
C, S = 64, 384
KEYS = ("@model_path/weights/w1.bin", "@model_path/weights/w2.bin")
_HEADER = ('program(1.3)\n[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
           '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
           '{"coremltools-version", "9.0"}})]\n{\n')


def _static_mil() -> str:
    t_x = f"tensor<fp16, [1, {C}, 1, {S}]>"
    t_w = f"tensor<fp16, [{C}, {C}, 1, 1]>"
    lines = [
        f"    func main<ios18>({t_x} x) {{",
        '        string pt = const()[name = string("pt"), val = string("valid")];',
        '        tensor<int32, [2]> st = const()[name = string("st"), val = tensor<int32, [2]>([1, 1])];',
        '        tensor<int32, [4]> pd = const()[name = string("pd"), val = tensor<int32, [4]>([0, 0, 0, 0])];',
        '        tensor<int32, [2]> dl = const()[name = string("dl"), val = tensor<int32, [2]>([1, 1])];',
        '        int32 gr = const()[name = string("gr"), val = int32(1)];',
    ]
    for i, key in enumerate(KEYS, 1):
        lines.append(f'        {t_w} w{i} = const()[name = string("w{i}"), val = {t_w}(BLOBFILE(path = '
                     f'string("{key}"), offset = uint64(64)))];')
    lines += [
        f'        {t_x} h = conv(dilations = dl, groups = gr, pad = pd, pad_type = pt, strides = st, weight = w1, '
        'x = x)[name = string("h")];',
        f'        {t_x} y = conv(dilations = dl, groups = gr, pad = pd, pad_type = pt, strides = st, weight = w2, '
        'x = h)[name = string("y")];',
        "    } -> (y);",
        "}",
    ]
    return _HEADER + "\n".join(lines) + "\n"


def _dynamic_mil() -> str:
    t_w = f"tensor<fp16, [1, 1, {C}, {C}]>"
    t_x = f"tensor<fp16, [1, 1, {C}, {S}]>"
    return (_HEADER + f"    func main<ios18>({t_w} w1, {t_w} w2, {t_x} x) {{\n"
            '        bool f = const()[name = string("f"), val = bool(false)];\n'
            f'        {t_x} h = matmul(transpose_x = f, transpose_y = f, x = w1, y = x)[name = string("h")];\n'
            f'        {t_x} y = matmul(transpose_x = f, transpose_y = f, x = w2, y = h)[name = string("y")];\n'
            "    } -> (y);\n}\n")


# ---- the ANE backend's diagnostics hook ---------------------------------------------------------

def ane_control(command: str) -> dict | None:
    """Sends ``command`` to the ANE backend's hook (src/orion_native/ane/ane_api.h); None when this
    orion was built without the ANE backend. Commands: info, route=inmemory|client, entry=two|one,
    patch-next, patch-clear, shutdown."""
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


def machine(device: str = "auto") -> dict:
    """What a verdict is valid for: the device and, for the ANE, OS build and chip."""
    from .sim import get_profile

    dev = _resolve(device)
    if dev == "sim":
        p = get_profile()
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


def cached_verdict(device: str = "auto") -> dict | None:
    """The cached verdict for this machine, or None (missing, unreadable or from another version)."""
    path = cache_path(machine(device))
    try:
        with open(path) as f:
            v = json.load(f)
    except (OSError, ValueError):
        return None
    return v if isinstance(v, dict) and v.get("version") == CACHE_VERSION else None


# ---- the probes ----------------------------------------------------------------------------------

def _weights(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple((rng.standard_normal((C, C)) / np.sqrt(C)).astype(np.float16) for _ in KEYS)


def _blobs(ws) -> dict[str, bytes]:
    from .blob import write_blob_file

    out = {}
    for key, w in zip(KEYS, ws):
        data, offsets = write_blob_file([w.reshape(C, C, 1, 1)])
        assert offsets == [64]
        out[key] = data
    return out


def _close(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal within a few fp16 steps of the output's scale (two chained fp16 layers)."""
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    scale = max(np.abs(b).max(), 1e-3)
    return bool(np.all(np.abs(a - b) <= 2.0 ** -8 * scale))


class _Meter:
    """Update time and compile budget used by one strategy step."""

    def __init__(self, device: str):
        self.device = device

    def _snap(self):
        from . import _native

        info = ane_control("info") if self.device == "ane" else None
        s = (info or {}).get("stats", {})
        return (int(_native.budget(self.device)[0]), s.get("framework_compiles", 0), s.get("hidden_compiles", 0),
                s.get("unverified_loads", 0))

    def __enter__(self):
        self.before = self._snap()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.ms = (time.perf_counter() - self.t0) * 1e3
        after = self._snap()
        self.runtime_budget = after[0] - self.before[0]
        self.framework_compiles = after[1] - self.before[1]
        self.hidden_compiles = after[2] - self.before[2]
        self.unverified_loads = after[3] - self.before[3]
        return False

    @property
    def budget_used(self) -> int:
        # What the device spent: runtime accounting, or what the backend observed, whichever is larger.
        return max(self.runtime_budget, self.framework_compiles + self.hidden_compiles)

    @property
    def budget_free(self) -> bool:
        return self.budget_used == 0 and self.unverified_loads == 0


def _probe(strategy: str, device: str, seed: int, x: np.ndarray) -> dict:
    from .runtime import compile_mil
    from .sim import get_profile

    wa, wb = _weights(seed), _weights(seed + 1000)
    static = _static_mil()
    # References: a fresh compile of B on the device and on the simulator. The extra newline gives the
    # reference its own identifier, so no cache (runtime, backend or daemon) can hand the probe's
    # result back as the "fresh" compile, or the other way round.
    with compile_mil(static + "\n", _blobs(wb), device=device) as fresh:
        y_fresh = fresh(x=x)["y"]
    with compile_mil(static + "\n", _blobs(wb), device="sim") as sim:
        y_sim = sim(x=x)["y"]
    r = {"strategy": strategy}
    base = get_profile()
    prog = None
    try:
        if strategy == "dynamic":
            prog = compile_mil(_dynamic_mil(), device=device)
            xd = x.reshape(1, 1, C, S)
            for name, w in zip(("w1", "w2"), wa):
                prog.stage(name, w.reshape(1, 1, C, C))
            y_a = prog(x=xd)["y"].reshape(y_fresh.shape)
            with _Meter(device) as m:
                for name, w in zip(("w1", "w2"), wb):
                    prog.stage(name, w.reshape(1, 1, C, C))
            y = prog(x=xd)["y"].reshape(y_fresh.shape)
        else:
            profile = base
            if strategy == "delta_reload" and device == "ane":
                # On the device the runtime must actually hand the reload to the backend (W1 on the same
                # model object); the simulator's "hardware" profile would just answer "no effect".
                from dataclasses import replace

                profile = replace(base, delta="paper")
            prog = compile_mil(static, _blobs(wa), device=device, profile=profile)
            y_a = prog(x=x)["y"]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", AneSimWarning)
                with _Meter(device) as m:
                    if strategy == "recompile":
                        prog.recompile(_blobs(wb))
                    elif strategy == "delta_reload":
                        prog.delta_reload(_blobs(wb))
                    elif device == "ane":
                        ane_control("patch-next")
                        try:
                            prog.delta_patch(_blobs(wb))
                        finally:
                            ane_control("patch-clear")  # in case no compile reached the backend
                    else:
                        prog.delta_patch(_blobs(wb))
            y = prog(x=x)["y"]
        fresh_ok, sim_ok = _close(y, y_fresh), _close(y, y_sim)
        if fresh_ok and (sim_ok or device == "sim"):
            verdict = "works"
        elif _close(y, y_a):
            verdict = "no effect"
        else:
            verdict = "wrong"
        r.update(verdict=verdict, ms=round(m.ms, 3), budget_used=m.budget_used, budget_free=m.budget_free,
                 runtime_budget=m.runtime_budget, framework_compiles=m.framework_compiles,
                 hidden_compiles=m.hidden_compiles, unverified_loads=m.unverified_loads,
                 matches_fresh=fresh_ok, matches_sim=sim_ok, error=None)
    except OrionError as e:
        r.update(verdict="error", ms=None, budget_used=None, budget_free=False, matches_fresh=False,
                 matches_sim=False, error=f"{type(e).__name__}: {e}")
    finally:
        if prog is not None:
            prog.release()
    return r


def _probe_routes() -> dict:
    """Hello-world on each route of the ANE backend (the direct _ANEClient route is experimental)."""
    from .runtime import compile_mil

    info = ane_control("info") or {}
    before = info.get("route", "inmemory")
    t = f"tensor<fp16, [1, {C}, 1, {S}]>"
    mil = (_HEADER + f"    func main<ios18>({t} a, {t} b) {{\n"
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
            ok = _close(z, (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16))
            out[route] = {"verdict": "works" if ok else "wrong", "error": None}
        except OrionError as e:
            out[route] = {"verdict": "error", "error": f"{type(e).__name__}: {e}"}
    ane_control(f"route={before}")
    return out


def run(device: str = "auto", *, out=None, write_cache: bool = True, seed: int = 20240917) -> dict:
    """Runs every probe on ``device``, prints the table to ``out`` (default stdout; None-like False to
    stay quiet), caches and returns the verdict."""
    dev = _resolve(device)
    m = machine(dev)
    x = np.random.default_rng(seed).standard_normal((1, C, 1, S)).astype(np.float16)
    results = {}
    for i, s in enumerate(STRATEGIES):
        results[s] = _probe(s, dev, seed + 10 * i, x)
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


_announced: set = set()


def allowed_strategies(device: str = "auto", verdict: dict | None = None, *, announce: bool = True) -> list[str]:
    """Weight-update strategies the runtime may use on this machine, in order of preference.

    Uses ``verdict`` or this machine's cached ``orion doctor`` verdict. Never a strategy that failed
    verification; ``delta_*`` only when verified correct, cheaper than recompile and budget-free;
    without a verdict, the upstream-proven dynamic -> recompile. Announced once in one log line.
    """
    if verdict is None:
        verdict = cached_verdict(device)
    allowed = _allowed(verdict)
    m = verdict["machine"] if verdict else machine(device)
    key = (cache_path(m), tuple(allowed))
    if announce and key not in _announced:
        _announced.add(key)
        skipped = "; ".join(f"{s}: {_why_not(verdict, s)}" for s in STRATEGIES if s not in allowed)
        log.info("orion: weight updates use %s%s", " -> ".join(allowed) or "nothing (no strategy verified)",
                 f" ({skipped})" if skipped else "")
    return allowed


# ---- command line (wired into orion.cli by add_doctor_parser) --------------------------------------

def add_doctor_parser(subparsers) -> None:
    d = subparsers.add_parser("doctor", help="verify the weight-update strategies on this machine")
    d.add_argument("--device", default="auto", choices=["auto", "sim", "ane"])
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


# ``orion.doctor()`` runs the probes; the module's other functions stay reachable as attributes.
class _CallableModule(types.ModuleType):
    def __call__(self, device: str = "auto", **kw) -> dict:
        return run(device, **kw)


sys.modules[__name__].__class__ = _CallableModule

__all__ = ["run", "allowed_strategies", "cached_verdict", "machine", "device_info", "ane_control", "print_table",
           "add_doctor_parser", "cmd_doctor", "STRATEGIES"]

