"""Hardware tests: the ANE backend on a real Apple Neural Engine, compared with the simulator.

Marked ``ane``: skipped unless ``orion.devices()`` reports an available ANE that is not the Linux fake.
One command on an Apple Silicon Mac (see README.md):  python -m pytest -m ane -v -rsx tests/ane
Every backend error names the exact call, its arguments' shapes and the NSError; assertion messages
carry the device record, so one failure report says what to fix.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import orion
from orion import _native, doctor
from orion.native.sim import Profile
from .op_programs import OPS
from runtime_programs import add_program, linear_program, rand, sub_program, weight_blob

pytestmark = pytest.mark.ane

KEY = "@model_path/weights/w.bin"


@pytest.fixture(scope="module")
def device():
    i = doctor.ane_control("info")
    return {"profile": Profile(chip=i["device"]["chip_profile"] or "m4"), "record": i["device"], "temp": i["temp_dir"]}


def close(got, want, rtol=1e-2, atol=1e-3):
    """ANE vs simulator: fp16 arithmetic, but accumulation order and transcendental approximations differ."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    finite = np.isfinite(want)
    assert np.array_equal(np.isfinite(got), finite), "non-finite values differ"
    scale = np.abs(want[finite]).max() if finite.any() else 1.0
    err = np.abs(got[finite] - want[finite]).max() if finite.any() else 0.0
    assert err <= atol + rtol * scale, f"max |ane - sim| = {err:.4g} > {atol} + {rtol} * {scale:.4g}"


def on_both(mil, weights, profile, **inputs):
    with orion.compile_mil(mil, weights, device="ane", profile=profile) as a, \
            orion.compile_mil(mil, weights, device="sim", profile=profile) as s:
        return a(**inputs), s(**inputs)


def test_device_record_and_probe_warnings(device):
    """Runs first: the backend is usable, and what the optional _ANEDeviceInfo probes could not read is
    shown in pytest's warnings summary (never a reason to refuse)."""
    i = doctor.ane_control("info")
    assert i["available"] and i["routes"]["inmemory"] == "usable", i
    for w in i["warnings"]:
        warnings.warn(f"ANE optional probe: {w}")


def test_hello_world(device):
    a, b = rand((1, 256, 1, 128), 1), rand((1, 256, 1, 128), 2)
    got, want = on_both(add_program(), None, device["profile"], a=a, b=b)
    close(got["z"], want["z"], rtol=1e-3)


@pytest.mark.parametrize("op", sorted(o["name"] for o in orion.sim.ops() if not o["status"].startswith("rejected")))
def test_op_matches_the_simulator(device, op):
    mil, weights, inputs = OPS[op]()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", orion.AneSimWarning)
            got, want = on_both(mil, weights, device["profile"], **inputs)
    except orion.CompileError as e:
        if e.constraint:  # the simulator rejects it for this chip: documented, not a backend bug
            pytest.skip(f"{op} rejected for {device['profile'].chip}: {e}")
        raise
    tol = {"scaled_dot_product_attention": 3e-2, "softmax": 2e-2, "layer_norm": 2e-2, "exp": 2e-2, "log": 2e-2,
           "pow": 2e-2, "sigmoid": 2e-2, "silu": 2e-2, "tanh": 2e-2}.get(op, 1e-2)
    for k in want:
        close(got[k], want[k], rtol=tol)


def test_weight_update_strategies_against_a_fresh_compile(device, tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_CACHE_DIR", str(tmp_path))
    v = doctor(device="ane", out=sys.stdout)
    r = v["results"]
    info = f"{device['record']} -> {r}"
    assert r["dynamic"]["verdict"] == "works" and r["dynamic"]["budget_used"] == 0, info
    assert r["recompile"]["verdict"] == "works" and r["recompile"]["budget_used"] >= 1, info
    for s in ("delta_reload", "delta_patch"):
        assert r[s]["verdict"] in ("works", "no effect", "wrong", "error"), info
    # Whatever the delta probes found, the runtime only takes what verified correct, budget-free and
    # cheaper than a recompile; dynamic -> recompile otherwise.
    allowed = doctor.allowed_strategies("ane", announce=False)
    assert allowed[0] == "dynamic" and allowed[-1] == "recompile", info
    for s in ("delta_reload", "delta_patch"):
        ok = r[s]["verdict"] == "works" and r[s]["budget_free"] and r[s]["ms"] < r["recompile"]["ms"]
        assert (s in allowed) == ok, info
    # Training asks the same verdict (and then runs the same update code the probe ran).
    assert (doctor.verified_delta("ane")[0] is not None) == any(s in allowed for s in doctor.DELTAS), info


def test_surfaces_and_alphabetical_binding(device):
    ins = {n: rand((1, 64, 1, 256), i) for i, n in enumerate(("x", "lora_a", "lora_b"))}
    with orion.compile_mil(sub_program(), device="ane") as p, orion.compile_mil(sub_program(), device="sim") as s:
        assert [i.name for i in p.inputs] == ["lora_a", "lora_b", "x"]
        close(p(**ins)["y"], s(**ins)["y"])
        for prog in (p, s):
            for n, val in ins.items():
                prog.input_surface(n).view("fp16", [1, 64, 1, 256])[...] = val
        order = ["x", "lora_a", "lora_b"]  # declaration order: slot i still feeds the i-th sorted name (C13)
        p.eval_slots([p.input_surface(n) for n in order], [p.output_surface("y")])
        s.eval_slots([s.input_surface(n) for n in order], [s.output_surface("y")])
        close(p.read_output("y"), s.read_output("y"))
        with pytest.raises(orion.InputError, match="not an IOSurface"):
            p.eval_slots([_native.Surface(p.input_surface("x").alloc_size)] * 3, [p.output_surface("y")])


def test_budget_accounting(device):
    before = doctor.ane_control("info")["stats"]
    used = _native.budget("ane")[0]
    w = rand((128, 64, 1, 1), 40, 0.1)
    with orion.compile_mil(linear_program(), {KEY: weight_blob(w)}, device="ane"):
        after = doctor.ane_control("info")["stats"]
        assert _native.budget("ane")[0] == used + 1
        assert after["framework_compiles"] == before["framework_compiles"] + 1


def test_cleanup_no_temp_folders_left(device):
    script = textwrap.dedent(f"""
        import sys; sys.path[:0] = {[os.path.abspath(p) for p in sys.path if p]!r}
        import json, os, orion
        from orion import doctor
        from runtime_programs import add_program
        kept = orion.compile_mil(add_program(shape=(1, 256, 1, 96)), device="ane")   # never released
        with orion.compile_mil(add_program(shape=(1, 256, 1, 112)), device="ane") as p:
            pass
        temp = doctor.ane_control("info")["temp_dir"]
        owners = os.path.join(temp, "orion-ane-owners")
        ids = [m.rsplit(".", 1)[0] for m in os.listdir(owners) if m.endswith("." + str(os.getpid()))]
        print(json.dumps({{"temp": temp, "pid": os.getpid(), "ids": ids}}))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(__file__))
    assert r.returncode == 0, r.stderr
    import json

    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(out["ids"]) == 2  # both folders existed while the process ran
    left = [i for i in out["ids"] if os.path.exists(os.path.join(out["temp"], i))]
    assert left == [], f"temp folders left behind in {out['temp']}: {left}"
    owners = os.path.join(out["temp"], "orion-ane-owners")
    if os.path.isdir(owners):
        assert not [m for m in os.listdir(owners) if m.endswith(f".{out['pid']}")]


def test_client_route_probe(device):
    """The direct _ANEClient route is experimental and unverified (it failed on an M4 Max):
    report what it does here. A failure is an xfail whose reason is the exact call, its arguments' shapes
    and the NSError (shown with ``-rx``)."""
    routes = doctor.ane_control("info")["routes"]
    assert routes["client"] != "usable", routes  # never claimed usable just because its selectors exist
    if not routes["client_selectors"]:
        pytest.skip("the _ANEClient route's selectors are missing here: " + routes["client_reason"])
    try:
        doctor.ane_control("route=client")
        a, b = rand((1, 256, 1, 128), 41), rand((1, 256, 1, 128), 42)
        got, want = on_both(add_program(), None, device["profile"], a=a, b=b)
        close(got["z"], want["z"])
    except orion.OrionError as e:
        pytest.xfail(f"direct route failed on this machine (please report): {e}")
    finally:
        doctor.ane_control("route=inmemory")
