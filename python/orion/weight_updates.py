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
chip; training uses a delta strategy only under such a verdict (``orion.doctor.verified_delta``), and
both call :func:`apply`, so what doctor verified is what training runs.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from .errors import AneSimWarning, InputError, OrionError

STRATEGIES = ("dynamic", "recompile", "delta_reload", "delta_patch")
DELTAS = ("delta_patch", "delta_reload")


@dataclass(frozen=True)
class WeightUpdate:
    """What one weight update did on the device.

    budget_used: compiles charged to this process's compile budget (C05): explicit ones, compiles a
        load did inside the device (``hidden_compiles``, observed or, on the simulator, as the evidence
        says), and loads where a compile could not be observed (``unverified_loads``).
    """

    strategy: str
    budget_used: int = 0
    compiles: int = 0
    hidden_compiles: int = 0
    unverified_loads: int = 0
    loads: int = 0
    unloads: int = 0
    weight_writes: int = 0

    @property
    def budget_free(self) -> bool:
        return self.budget_used == 0 and self.unverified_loads == 0

    @classmethod
    def from_native(cls, strategy: str, report: dict) -> "WeightUpdate":
        for _, msg in report["warnings"]:  # the simulator says what it reproduced (C07)
            warnings.warn(msg, AneSimWarning, stacklevel=4)
        return cls(strategy, **{k: int(report[k]) for k in ("budget_used", "compiles", "hidden_compiles",
                                                            "unverified_loads", "loads", "unloads")})


def apply(prog, strategy: str, weights: Mapping) -> WeightUpdate:
    """Updates ``prog`` (an ``orion.runtime.Program``) to new weights with ``strategy``.

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
    from .blob import write_blob_file

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
    from .runtime import compile_mil, resolve_device

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


__all__ = ["STRATEGIES", "DELTAS", "WeightUpdate", "apply", "probe"]
