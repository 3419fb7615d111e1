"""Weight updates: one interface to the four strategies, one probe that decides whether one works here.

Weights are baked into a compiled ANE program (C07), so training needs a way to get new weights onto
the device:

* ``dynamic``      weights are program inputs, written into their surfaces (``Program.stage``)
* ``recompile``    a new program from the new weight bytes (charges the compile budget, C05)
* ``delta_reload`` rewrite the weight files, unload and load the same model (no effect on M4/M5, C07)
* ``delta_patch``  a new descriptor with the new weights, loaded without an explicit compile (probably a
                   compile inside the device; what is known: docs/ane-framework.md)

:func:`apply` performs one update through the backend and returns a :class:`WeightUpdate`: what the
device did (compiles, loads, compile budget used), never a claim about the outputs. Only :func:`probe`
says whether a strategy works, by comparing the updated program's output with a fresh compile of the
new weights. ``orion doctor`` runs the probe for every strategy and caches the verdicts per OS build and
chip; training uses a delta strategy only under such a verdict (:func:`verified_delta`), and
both call :func:`apply`, so what doctor verified is what training runs.
"""

from __future__ import annotations

import logging
import os
import re
import time
import warnings
from typing import Mapping

import numpy as np

from ..errors import AneSimWarning, InputError, OrionError
from ..fileio import read_json
from .blob import write_blob_file
from .runtime import WeightUpdate, ane_control, compile_mil, resolve_device
from .sim import get_profile

log = logging.getLogger("orion")

STRATEGIES = ("dynamic", "recompile", "delta_reload", "delta_patch")
DELTAS = ("delta_patch", "delta_reload")
CACHE_VERSION = 2  # 2: results from probe (budget from the update's own report)


def apply(prog, strategy: str, weights: Mapping) -> WeightUpdate:
    """Updates ``prog`` (an ``orion.native.runtime.Program``) to new weights with ``strategy``.

    ``dynamic``: ``weights`` maps input names to arrays (staged into their surfaces). The others: the
    program's weight dictionary (``"@model_path/..."`` -> whole MILBlob files).
    """
    if strategy == "dynamic":
        for name, arr in weights.items():
            prog.stage(name, arr)
        return WeightUpdate("dynamic", weight_writes=len(weights))
    if strategy == "recompile":
        return prog.recompile(weights)
    if strategy == "delta_reload":
        return prog.delta_reload(weights)
    if strategy == "delta_patch":
        return prog.delta_patch(weights)
    raise InputError(f"unknown weight-update strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")


# ---- the probe program: y = W2 (W1 x), two weight files (so a recipe that only handles one file, or
# the framework's single "data" file, shows up), fp16, every surface exactly 49,152 bytes (C04) ----------

C, S = 64, 384
KEYS = ("@model_path/weights/w1.bin", "@model_path/weights/w2.bin")
HEADER = ('program(1.3)\n[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
           '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
           '{"coremltools-version", "9.0"}})]\n{\n')


def static_mil() -> str:
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
    return HEADER + "\n".join(lines) + "\n"


def dynamic_mil() -> str:
    t_w = f"tensor<fp16, [1, 1, {C}, {C}]>"
    t_x = f"tensor<fp16, [1, 1, {C}, {S}]>"
    return (HEADER + f"    func main<ios18>({t_w} w1, {t_w} w2, {t_x} x) {{\n"
            '        bool f = const()[name = string("f"), val = bool(false)];\n'
            f'        {t_x} h = matmul(transpose_x = f, transpose_y = f, x = w1, y = x)[name = string("h")];\n'
            f'        {t_x} y = matmul(transpose_x = f, transpose_y = f, x = w2, y = h)[name = string("y")];\n'
            "    } -> (y);\n}\n")


def _weights(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return tuple((rng.standard_normal((C, C)) / np.sqrt(C)).astype(np.float16) for _ in KEYS)


def _blobs(ws) -> dict[str, bytes]:
    out = {}
    for key, w in zip(KEYS, ws):
        data, offsets = write_blob_file([w.reshape(C, C, 1, 1)])
        assert offsets == [64]
        out[key] = data
    return out


def outputs_match(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal within a few fp16 steps of the output's scale (two chained fp16 layers)."""
    a = a.astype(np.float64).ravel()
    b = b.astype(np.float64).ravel()
    scale = max(np.abs(b).max(), 1e-3)
    return bool(np.all(np.abs(a - b) <= 2.0 ** -8 * scale))


def probe(strategy: str, device: str = "auto", profile=None, *, seed: int = 20240917) -> dict:
    """Does ``strategy`` work on ``device`` (under ``profile``)? The one test ``orion doctor`` runs.

    Compiles the probe program with weights A, updates it to weights B with :func:`apply` - exactly as
    training does - and compares the output with a fresh compile of B on the same device and, on a
    device, with the simulator. Verdict: "works" (equals the fresh compile), "no effect" (still A's
    output), "wrong" (neither) or "error" (the update raised; ``error`` says how). Also returns what
    the update did (:class:`WeightUpdate` fields) and its milliseconds.
    """
    if strategy not in STRATEGIES:
        raise InputError(f"unknown weight-update strategy {strategy!r}: use one of {', '.join(STRATEGIES)}")
    device = resolve_device(device)
    x = np.random.default_rng(seed).standard_normal((1, C, 1, S)).astype(np.float16)
    wa, wb = _weights(seed + 1), _weights(seed + 1001)
    static = static_mil()
    # References: a fresh compile of B on the device and on the simulator. The extra newline gives the
    # reference its own identifier, so no cache (runtime, backend or daemon) can hand the probe's
    # result back as the "fresh" compile, or the other way round.
    with compile_mil(static + "\n", _blobs(wb), device=device, profile=profile) as fresh:
        y_fresh = fresh(x=x)["y"]
    with compile_mil(static + "\n", _blobs(wb), device="sim") as sim:
        y_sim = sim(x=x)["y"]
    r = {"strategy": strategy}
    prog = None
    try:
        if strategy == "dynamic":
            prog = compile_mil(dynamic_mil(), device=device, profile=profile)
            xd = x.reshape(1, 1, C, S)
            apply(prog, "dynamic", {n: w.reshape(1, 1, C, C) for n, w in zip(("w1", "w2"), wa)})
            y_a = prog(x=xd)["y"].reshape(y_fresh.shape)
            new = {n: w.reshape(1, 1, C, C) for n, w in zip(("w1", "w2"), wb)}
            run = lambda: prog(x=xd)["y"].reshape(y_fresh.shape)  # noqa: E731
        else:
            prog = compile_mil(static, _blobs(wa), device=device, profile=profile)
            y_a = prog(x=x)["y"]
            new = _blobs(wb)
            run = lambda: prog(x=x)["y"]  # noqa: E731
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AneSimWarning)
            t0 = time.perf_counter()
            u = apply(prog, strategy, new)
            ms = (time.perf_counter() - t0) * 1e3
        y = run()
        fresh_ok, sim_ok = outputs_match(y, y_fresh), outputs_match(y, y_sim)
        if fresh_ok and (sim_ok or device == "sim"):
            verdict = "works"
        elif outputs_match(y, y_a):
            verdict = "no effect"
        else:
            verdict = "wrong"
        r.update(verdict=verdict, ms=round(ms, 3), budget_used=u.budget_used, budget_free=u.budget_free,
                 compiles=u.compiles, hidden_compiles=u.hidden_compiles, unverified_loads=u.unverified_loads,
                 loads=u.loads, unloads=u.unloads, matches_fresh=fresh_ok, matches_sim=sim_ok, error=None)
    except OrionError as e:
        r.update(verdict="error", ms=None, budget_used=None, budget_free=False, matches_fresh=False,
                 matches_sim=False, error=f"{type(e).__name__}: {e}")
    finally:
        if prog is not None:
            prog.release()
    return r


# ---- machine identity and the verdict cache ----------------------------------------------------

def machine(device: str = "auto", profile=None) -> dict:
    """What a verdict is valid for: the device and, for the ANE, OS build and chip; for the simulator
    the profile's chip and delta behaviour (``profile``, default the current default profile)."""
    dev = resolve_device(device)
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
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "orion")
    return root


def cache_path(m: dict) -> str:
    key = f"{m['device']}-{m['os_build']}-{m['chip']}-{m['ane']}" + ("-fake" if m.get("fake") else "")
    return os.path.join(cache_dir(), "doctor-" + re.sub(r"[^A-Za-z0-9._-]+", "_", key) + ".json")


def cached_verdict(device: str = "auto", profile=None) -> dict | None:
    """The cached verdict for this machine, or None (missing, unreadable or from another version)."""
    path = cache_path(machine(device, profile))
    try:
        v = read_json(path, OrionError, max_bytes=1 << 20)
    except OrionError:                        # missing, unreadable, corrupt: as if there were none
        return None
    return v if isinstance(v, dict) and v.get("version") == CACHE_VERSION else None


# ---- the rule --------------------------------------------------------------------------------------

def verdict_allowed(verdict: dict | None) -> list[str]:
    """The strategies ``verdict`` (None: no verdict) allows, in order of preference (the rule above)."""
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
    allowed = verdict_allowed(verdict)
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
    allowed = verdict_allowed(verdict)
    m = verdict["machine"] if verdict else machine(device, profile)
    key = (cache_path(m), tuple(allowed))
    if announce and key not in _announced:
        _announced.add(key)
        skipped = "; ".join(f"{s}: {_why_not(verdict, s)}" for s in STRATEGIES if s not in allowed)
        log.info("orion: weight updates use %s%s", " -> ".join(allowed) or "nothing (no strategy verified)",
                 f" ({skipped})" if skipped else "")
    return allowed


__all__ = ["STRATEGIES", "DELTAS", "CACHE_VERSION", "WeightUpdate", "apply", "probe", "machine", "cache_dir",
           "cache_path", "cached_verdict", "verdict_allowed", "verified_delta", "allowed_strategies"]
