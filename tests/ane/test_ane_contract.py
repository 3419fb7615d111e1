"""The ANE backend (src/orion_native/ane) against the documented framework contract, on Linux through
the fake AppleNeuralEngine (tests/ane_fake), which forwards to the simulator and checks every call
(the ``fake`` fixture fails a test whenever the fake logged a violation). Run by
scripts/test_ane_fake.sh; skipped in builds without the fake."""

from __future__ import annotations

import json
import os
import re
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
from runtime_programs import (add_program, dynamic_linear_program, linear_program, rand, sub_program, three_outputs,
                              weight_blob)

pytestmark = pytest.mark.ane_fake

KEY = "@model_path/weights/w.bin"
ID_RE = re.compile(r"^[0-9A-F]{64}_[0-9A-F]{64}_[0-9A-F]{64}$")


def info():
    return doctor.ane_control("info")


def temp_ids():
    d = info()["temp_dir"]
    return {n for n in os.listdir(d) if ID_RE.match(n)} if os.path.isdir(d) else set()


def both(mil, weights=None, profile=None, **inputs):
    """Outputs of the same program on the ANE backend and on the simulator."""
    with orion.compile_mil(mil, weights, device="ane", profile=profile) as a, \
            orion.compile_mil(mil, weights, device="sim", profile=profile) as s:
        return a(**inputs), s(**inputs)


def run_python(code, **env):
    e = dict(os.environ, **env)
    paths = [os.path.abspath(p) for p in sys.path if p]
    code = f"import sys; sys.path[:0] = {paths!r}\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          cwd=os.path.dirname(__file__), timeout=300)


# ---- device detection -------------------------------------------------------------------------------

def test_device_record(fake):
    # Both backends register themselves at load time, in no fixed order; the listing puts the simulator first.
    assert [d["name"] for d in orion.devices()] == ["sim", "ane"]
    ane = next(d for d in orion.devices() if d["name"] == "ane")
    assert ane["available"] and ane["reason"] == ""
    i = info()
    assert i["fake"] and i["available"] and i["route"] == "inmemory" and i["weight_entry"] == "two"
    d = i["device"]
    assert d["has_ane"] and d["subtype"] == "h16" and d["chip_profile"] == "m4" and d["dialect"] == "ios18"
    assert d["os_build"] == "FAKE0" and d["num_cores"] == 16
    assert "+[_ANEDeviceInfo aneSubTypeAndVariant]" in i["missing_optional"]  # optional, guarded
    rec = next(r for r in doctor.device_info() if r["name"] == "ane")
    assert rec["dialect"] == "ios18" and rec["compile_budget"]["limit"] >= 1 and rec["fake"]


@pytest.mark.parametrize("env, reason", [
    ({"ORION_ANE_FAKE_NO_ANE": "1"}, "hasANE] = NO"),
    ({"ORION_ANE_FRAMEWORK_PATH": "/nonexistent/AppleNeuralEngine"}, "dlopen(/nonexistent/AppleNeuralEngine) failed"),
])
def test_unavailable_ane_is_explained_and_auto_falls_back(env, reason):
    r = run_python("""
        import json, logging, orion
        logging.basicConfig(level=logging.INFO, format="LOG %(message)s")
        ane = next(d for d in orion.devices() if d["name"] == "ane")
        print(json.dumps(ane))
        from runtime_programs import add_program
        p = orion.compile_mil(add_program())          # auto -> simulator, announced once
        q = orion.compile_mil(add_program(), device="auto")
        print("DEVICE", p.device, q.device)
        try:
            orion.compile_mil(add_program(), device="ane")
        except orion.OrionError as e:
            print("ERROR", type(e).__name__, e)
    """, **env)
    assert r.returncode == 0, r.stderr
    ane = json.loads(r.stdout.splitlines()[0])
    assert not ane["available"] and reason in ane["reason"]
    assert "build FAKE0" in ane["reason"] or "dlopen" in reason
    assert "DEVICE sim sim" in r.stdout
    assert sum("simulator" in line for line in r.stderr.splitlines() if line.startswith("LOG")) == 1  # one line
    assert "ERROR OrionError" in r.stdout and reason in r.stdout


# ---- programs and ops ---------------------------------------------------------------------------------

def test_hello_world_equals_the_simulator(fake, ane_stats):
    d = ane_stats()
    a, b = rand((1, 256, 1, 128), 1), rand((1, 256, 1, 128), 2)
    got, want = both(add_program(), a=a, b=b)
    np.testing.assert_array_equal(got["z"], want["z"])
    s = d()
    assert s["framework_compiles"] == 1 and s["loads"] == 1 and s["evals"] == 1


@pytest.mark.parametrize("name", ["linear", "linear_fp32_io", "three_outputs", "sub_non_alphabetical", "dynamic"])
def test_runtime_programs_equal_the_simulator(fake, name):
    w = rand((128, 64, 1, 1), 3, 0.1)
    mil, weights, inputs = {
        "linear": (linear_program(), {KEY: weight_blob(w)}, {"x": rand((1, 64, 1, 256), 4)}),
        "linear_fp32_io": (linear_program(fp32_io=True), {KEY: weight_blob(w)},
                           {"x": rand((1, 64, 1, 256), 4).astype(np.float32)}),
        "three_outputs": (three_outputs(), None, {"x": rand((1, 64, 1, 256), 5)}),
        "sub_non_alphabetical": (sub_program(), None, {n: rand((1, 64, 1, 256), i) for i, n in
                                                       enumerate(("x", "lora_a", "lora_b"))}),
        "dynamic": (dynamic_linear_program(), None, {"w": rand((1, 1, 64, 64), 6, 0.2), "x": rand((1, 1, 64, 256), 7)}),
    }[name]
    got, want = both(mil, weights, **inputs)
    assert got.keys() == want.keys()
    for k in got:
        np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("op", sorted(o["name"] for o in orion.sim.ops()))
def test_every_op(fake, op, ane_stats):
    status = next(o["status"] for o in orion.sim.ops() if o["name"] == op)
    if status.startswith("rejected"):
        # Rejected ops never reach the framework: the simulator's validation stops them first.
        d = ane_stats()
        mil = OPS["identity"]()[0].replace("identity(x = x)", f"{op}(x = x)")
        with pytest.raises(orion.CompileError):
            orion.compile_mil(mil, device="ane")
        assert d()["framework_compiles"] == 0
        return
    assert op in OPS, f"tests/ane/op_programs.py has no program for the simulator op '{op}'"
    mil, weights, inputs = OPS[op]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", orion.AneSimWarning)
        got, want = both(mil, weights, **inputs)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k])


@pytest.mark.parametrize("entry", ["one", "two"])
def test_weight_dictionary_entry_shapes(fake, entry):
    try:
        assert doctor.ane_control(f"entry={entry}")["weight_entry"] == entry
        w = rand((128, 64, 1, 1), 8 + len(entry), 0.1)
        x = rand((1, 64, 1, 256), 9)
        got, want = both(linear_program(), {KEY: weight_blob(w)}, x=x)
        np.testing.assert_array_equal(got["y"], want["y"])
    finally:
        doctor.ane_control("entry=two")


def test_direct_client_route(fake, ane_stats):
    try:
        assert doctor.ane_control("route=client")["route"] == "client"
        d = ane_stats()
        w = rand((128, 64, 1, 1), 12, 0.1)
        x = rand((1, 64, 1, 256), 13)
        before = temp_ids()
        with orion.compile_mil(linear_program(), {KEY: weight_blob(w)}, device="ane") as p:
            (new,) = temp_ids() - before
            files = sorted(os.listdir(os.path.join(info()["temp_dir"], new)))
            assert {"model.mil", "net.plist", "data", "weights"} <= set(files)
            y = p(x=x)["y"]
        with orion.compile_mil(linear_program(), {KEY: weight_blob(w)}, device="sim") as s:
            np.testing.assert_array_equal(y, s(x=x)["y"])
        assert d()["framework_compiles"] == 1
    finally:
        doctor.ane_control("route=inmemory")


# ---- surfaces and binding -----------------------------------------------------------------------------

def test_surfaces_are_iosurfaces_and_zero_copy(fake):
    with orion.compile_mil(add_program(), device="ane") as p:
        sa, sb = p.input_surface("a"), p.input_surface("b")
        assert sa.alloc_size == sb.alloc_size == 256 * 128 * 2 and p.output_surface("z").alloc_size == sa.alloc_size
        a, b = rand((1, 256, 1, 128), 14), rand((1, 256, 1, 128), 15)
        sa.view("fp16", [1, 256, 1, 128])[...] = a
        sb.view("fp16", [1, 256, 1, 128])[...] = b
        p.eval()
        z = p.output_surface("z").view("fp16", [1, 256, 1, 128])
        with orion.compile_mil(add_program(), device="sim") as s:
            np.testing.assert_array_equal(z, s(a=a, b=b)["z"])


def test_plain_surfaces_are_rejected(fake):
    with orion.compile_mil(add_program(), device="ane") as p:
        p.bind_input("a", _native.Surface(p.input_surface("a").alloc_size))
        with pytest.raises(orion.InputError, match="not an IOSurface"):
            p.eval()


@pytest.mark.parametrize("quantize,copy_in", [(None, False), ("int8", True)])
def test_shared_layer_models_run_on_the_device_as_on_the_simulator(fake, tmp_path, quantize, copy_in, monkeypatch):
    """A model whose layers share one program (weights and KV cache bound per layer: the default at real
    depth) binds surfaces made by the program's backend - IOSurfaces on the ANE, which refuses heap ones - and
    computes what the simulator computes; with compressed weights each layer's are decoded into the program's
    own IOSurfaces before its evals (models/streamed.py); with caches held on the host each layer's is copied
    into the program's own IOSurface, which the program sets share (stages.cache_copied_in). memory_plan
    counts the ANE's surfaces whole (IOSurfaces are not the simulator's mapped pages), as Model.memory() does."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
    from deep_models import make_deep, prompt_ids
    from orion.models import load
    from orion.models import stages as stages_mod
    from orion.models.memory import memory_plan
    from orion.models.stages import LayerStage
    monkeypatch.setattr(stages_mod, "CACHE_COPY_RATIO", 1 if copy_in else 10**9)

    path = make_deep("llama3", str(tmp_path / "deep"), layers=6)
    for name in ("tokenizer.json", "tokenizer_config.json"):    # token ids in, ids out: no tokenizer package needed
        os.remove(os.path.join(path, name))
    ids = prompt_ids("llama3", 12)
    out = {}
    for device in ("ane", "sim"):
        m = load(path, device=device, layers="shared", quantize=quantize)
        try:
            out[device] = (m.logits(ids), m.generate(ids, max_tokens=4, stop_tokens=[]).tokens)
            assert m.engine.shared_layers and m.engine.streaming == (quantize is not None)
            mem = m.memory()
            assert (mem["layer_weights_streamed"] > 0) == (quantize is not None)
            layers = [st for sts in m.engine.sets.values() for st in sts if isinstance(st, LayerStage)]
            assert layers and all(bool(st.host_caches) == copy_in for st in layers)
            if device == "ane":
                plan = memory_plan(m, n_prompt=12, n_new=4)
                assert {k: plan[k] for k in ("kv_cache", "program_surfaces")} == \
                    {k: mem[k] for k in ("kv_cache", "program_surfaces")}
        finally:
            m.release()
    assert np.array_equal(out["ane"][0], out["sim"][0]) and out["ane"][1] == out["sim"][1]


def _small_surface_program():
    # Tensors of 8 KB on a program whose profile allows 512-byte surfaces: its IOSurfaces are small.
    return orion.compile_mil(add_program(shape=(1, 64, 1, 64)), device="ane", profile=Profile(min_surface_bytes=512))


def test_small_and_non_uniform_surfaces_fail_like_the_hardware(fake):
    with orion.compile_mil(add_program(shape=(1, 64, 1, 64)), device="ane") as p, _small_surface_program() as small, \
            orion.compile_mil(add_program(shape=(1, 64, 1, 1024)), device="ane") as big:
        p.bind_input("a", small.input_surface("a"))
        p.bind_input("b", small.input_surface("b"))
        with pytest.raises(orion.EvalError) as e:
            p.eval()
        assert e.value.status == 0x1d and e.value.constraint == "C04"
        p.bind_input("a", p.output_surface("z"))  # 49,152 B
        p.bind_input("b", big.input_surface("b"))  # 131,072 B
        with pytest.raises(orion.EvalError) as e:
            p.eval()
        assert e.value.status == 0x1d and e.value.constraint == "C12"
        with pytest.raises(orion.EvalError) as e:
            p.eval_slots([small.input_surface("a"), small.input_surface("b")], [])
        assert e.value.constraint == "C42"


def test_the_fake_catches_surfaces_the_backend_lets_through(fake):
    # The backend checks sizes against the program's profile; with a 512-byte minimum it lets 8 KB
    # surfaces through, and the (fake) hardware answers status 0x1d - and logs the contract violation.
    fake.expect(1)
    with _small_surface_program() as small:
        a = rand((1, 64, 1, 64), 16)
        with pytest.raises(orion.EvalError) as e:
            small(a=a, b=a)
    assert e.value.status == 0x1d
    assert "NSError domain=com.apple.appleneuralengine code=8" in str(e.value) and "FAKE0" in str(e.value)


def test_alphabetical_slots(fake):
    ins = {n: rand((1, 64, 1, 256), i) for i, n in enumerate(("x", "lora_a", "lora_b"))}
    with orion.compile_mil(sub_program(), device="ane") as p, orion.compile_mil(sub_program(), device="sim") as s:
        assert [i.name for i in p.inputs] == ["lora_a", "lora_b", "x"]
        np.testing.assert_array_equal(p(**ins)["y"], s(**ins)["y"])
        # A raw request in declaration order binds x to slot 0 (lora_a): C13 reproduced by the device.
        for prog in (p, s):
            for n, v in ins.items():
                prog.input_surface(n).view("fp16", [1, 64, 1, 256])[...] = v
        order = ["x", "lora_a", "lora_b"]
        p.eval_slots([p.input_surface(n) for n in order], [p.output_surface("y")])
        s.eval_slots([s.input_surface(n) for n in order], [s.output_surface("y")])
        np.testing.assert_array_equal(p.read_output("y"), s.read_output("y"))


def test_request_built_once_per_surface_set(fake, ane_stats):
    with orion.compile_mil(add_program(), device="ane") as p, orion.compile_mil(add_program(), device="ane") as q:
        d = ane_stats()
        a = rand((1, 256, 1, 128), 17)
        for _ in range(5):
            p(a=a, b=a)
        assert d()["requests_built"] == 1 and d()["evals"] == 5
        p.bind_input("a", q.input_surface("a"))  # another IOSurface of the same size
        p(a=a, b=a)
        p(a=a, b=a)
        assert d()["requests_built"] == 2


def test_requests_of_many_surface_sets_are_kept(fake, ane_stats):
    """A program every layer shares cycles through one surface set per layer: each set's request is built
    once, not once per eval (the cache held 4 sets, so 30 layers rebuilt every request on every token)."""
    with orion.compile_mil(add_program(), device="ane") as p:
        a = rand((1, 256, 1, 128), 18)
        size = p.input_surface("a").alloc_size
        sets = [p.new_surface(size) for _ in range(36)]
        assert all(s.alloc_size == size for s in sets)
        d = ane_stats()
        for _ in range(3):
            for s in sets:
                p.bind_input("a", s)
                np.testing.assert_array_equal(p(a=a, b=a)["z"], a + a)
        assert d()["requests_built"] == 36 and d()["evals"] == 108


# ---- budget -------------------------------------------------------------------------------------------

def test_budget_accounting(fake, ane_stats):
    used0 = _native.budget("ane")[0]
    d = ane_stats()
    w = rand((128, 64, 1, 1), 18, 0.1)
    p = orion.compile_mil(linear_program(), {KEY: weight_blob(w)}, device="ane")
    assert _native.budget("ane")[0] == used0 + 1 and d()["framework_compiles"] == 1
    # Same MIL + weights under another profile: another runtime identifier, the same framework
    # identifier - the backend shares the loaded model instead of compiling again.
    q = orion.compile_mil(linear_program(), {KEY: weight_blob(w)}, device="ane", profile=Profile(strictness="permissive"))
    assert d()["framework_compiles"] == 1 and d()["shared_models"] == 1
    x = rand((1, 64, 1, 256), 19)
    np.testing.assert_array_equal(p(x=x)["y"], q(x=x)["y"])
    # The runtime refuses before the framework would fail silently (C05), naming the fix.
    _native.set_budget_limit("ane", _native.budget("ane")[0])
    try:
        with pytest.raises(orion.BudgetExceeded, match="dynamic") as e:
            orion.compile_mil(linear_program(), {KEY: weight_blob(rand((128, 64, 1, 1), 20))}, device="ane")
        assert e.value.constraint == "C05" and d()["framework_compiles"] == 1
    finally:
        _native.set_budget_limit("ane", 10**9)
    p.release()
    q.release()


def test_framework_budget_exhaustion_is_an_error_not_silence(fake, ane_stats):
    fake.set_budget(fake.report()["compiles"] + fake.report()["hidden_compiles"])
    before = temp_ids()
    try:
        with pytest.raises(orion.CompileError, match=r"-\[_ANEInMemoryModel compileWithQoS:21 options:@\{\} error:&error\] \(model [0-9A-F]{16}\.\.\.\) "
                                                    r"returned NO: no NSError"):
            orion.compile_mil(linear_program(), {KEY: weight_blob(rand((128, 64, 1, 1), 21))}, device="ane")
    finally:
        fake.set_budget(10**9)
    assert temp_ids() == before


# ---- failures carry the details; nothing leaks ---------------------------------------------------------

def test_framework_compile_failure_is_typed_with_the_nserror(fake, monkeypatch, ane_stats):
    # The device is an M1 (fp32 I/O casts rejected, C28) while the caller validated for M4.
    monkeypatch.setenv("ORION_ANE_FAKE_CHIP", "m1")
    d = ane_stats()
    before, live = temp_ids(), info()["live_models"]
    surfaces = fake.report()["surfaces_live"]
    with pytest.raises(orion.CompileError) as e:
        orion.compile_mil(linear_program(fp32_io=True), {KEY: weight_blob(rand((128, 64, 1, 1), 22))}, device="ane")
    msg = str(e.value)
    assert "ANECCompile() FAILED" in msg and "-[_ANEInMemoryModel compileWithQoS:21 options:@{} error:&error]" in msg
    assert "NSError domain=com.apple.appleneuralengine.compiler code=1" in msg and "C28" in msg
    assert "build FAKE0" in msg and "ANE h16g" in msg
    assert temp_ids() == before and info()["live_models"] == live and d()["framework_compiles"] == 0
    assert fake.report()["surfaces_live"] == surfaces


def test_unload_load_and_state_errors(fake):
    p = orion.compile_mil(add_program(), device="ane")
    a = rand((1, 256, 1, 128), 23)
    z = p(a=a, b=a)["z"]
    p.unload()
    with pytest.raises(orion.ProgramStateError):
        p(a=a, b=a)
    p.load()
    np.testing.assert_array_equal(p(a=a, b=a)["z"], z)
    p.release()
    with pytest.raises(orion.ProgramStateError):
        p(a=a, b=a)


def test_release_and_shutdown_remove_folders_models_and_surfaces(fake):
    surfaces0 = fake.report()["surfaces_live"]
    before = temp_ids()
    w = rand((128, 64, 1, 1), 24, 0.1)
    p = orion.compile_mil(linear_program(), {KEY: weight_blob(w)}, device="ane")
    (new,) = temp_ids() - before
    folder = os.path.join(info()["temp_dir"], new)
    with open(os.path.join(folder, "model.mil")) as f:
        assert f.read() == linear_program()  # C44: pre-populated before compile
    with open(os.path.join(folder, "weights", "w.bin"), "rb") as f:
        assert f.read() == weight_blob(w)
    p(x=rand((1, 64, 1, 256), 25))
    p.release()
    assert new in temp_ids()  # the runtime keeps recently compiled models warm, as the daemon does
    _native.shutdown()        # what interpreter exit does: drop them
    assert new not in temp_ids()
    assert not os.path.exists(os.path.join(info()["temp_dir"], "orion-ane-owners", f"{new}.{os.getpid()}"))
    r = fake.report()
    assert r["surfaces_live"] <= surfaces0 and r["models_alive"] == info()["live_models"]


def test_exit_cleans_up_and_start_up_removes_stale_folders(tmp_path):
    script = """
        import orion
        from orion import doctor
        from runtime_programs import add_program
        p = orion.compile_mil(add_program(), device="ane")   # never released
        print(doctor.ane_control("info")["temp_dir"])
    """
    env = {"TEMP": str(tmp_path)}  # GNUstep's NSTemporaryDirectory() follows TEMP
    r = run_python(script, **env)
    assert r.returncode == 0, r.stderr
    temp = r.stdout.strip().splitlines()[-1]
    assert temp.startswith(str(tmp_path))
    assert [n for n in os.listdir(temp) if ID_RE.match(n) or n == "orion-ane-owners"] == []
    # A dead orion process's folder (owner marker with an impossible pid) goes at the next start-up;
    # a folder without a marker (another tool's) is left alone.
    stale, foreign = "A" * 64 + "_" + "B" * 64 + "_" + "C" * 64, "D" * 64 + "_" + "E" * 64 + "_" + "F" * 64
    for n in (stale, foreign):
        os.makedirs(os.path.join(temp, n))
    os.makedirs(os.path.join(temp, "orion-ane-owners"))
    open(os.path.join(temp, "orion-ane-owners", stale + ".999999999"), "w").close()
    r = run_python(script, **env)
    assert r.returncode == 0, r.stderr
    assert sorted(n for n in os.listdir(temp) if ID_RE.match(n) or n == "orion-ane-owners") == [foreign]


# ---- weight-update probes ----------------------------------------------------------------------------

def test_delta_reload_reloads_the_same_model_and_the_daemon_keeps_the_baked_weights(fake, ane_stats):
    # Under the default profile too: the runtime hands the reload to the device, whatever the profile
    # says about the simulator, and reports what the device did - not what the outputs became.
    wa, wb = rand((128, 64, 1, 1), 26, 0.1), rand((128, 64, 1, 1), 27, 0.1)
    x = rand((1, 64, 1, 256), 28)
    d = ane_stats()
    p = orion.compile_mil(linear_program(), {KEY: weight_blob(wa)}, device="ane")
    y_a = p(x=x)["y"]
    u = p.delta_reload({KEY: weight_blob(wb)})
    assert (u.unloads, u.loads, u.hidden_compiles, u.budget_used) == (1, 1, 0, 0) and u.budget_free
    np.testing.assert_array_equal(p(x=x)["y"], y_a)        # what the device did (C07)
    s = d()
    assert s["reload_probes"] == 1 and s["unloads"] == 1 and s["loads"] == 2 and s["hidden_compiles"] == 0
    p.release()


def test_delta_patch_is_an_observed_hidden_compile(fake, ane_stats):
    # No side channel: Program.delta_patch is always the patch recipe on the device, with the program's own
    # model as the donor; the hidden compile it causes is observed, reported and charged.
    wa, wb = rand((128, 64, 1, 1), 29, 0.1), rand((128, 64, 1, 1), 30, 0.1)
    x = rand((1, 64, 1, 256), 31)
    p = orion.compile_mil(linear_program(), {KEY: weight_blob(wa)}, device="ane")
    used0 = _native.budget("ane")[0]
    d = ane_stats()
    u = p.delta_patch({KEY: weight_blob(wb)})
    s = d()
    assert s["patch_probes"] == 1 and s["framework_compiles"] == 0 and s["hidden_compiles"] == 1
    assert (u.hidden_compiles, u.budget_used, u.loads) == (1, 1, 1) and not u.budget_free
    assert _native.budget("ane")[0] == used0 + 1
    with orion.compile_mil(linear_program() + "\n", {KEY: weight_blob(wb)}, device="sim") as fresh:
        np.testing.assert_array_equal(p(x=x)["y"], fresh(x=x)["y"])
    p.release()


def test_doctor_on_the_fake_device(fake, monkeypatch, tmp_path):
    monkeypatch.setenv("ORION_CACHE_DIR", str(tmp_path))
    d = info()["stats"]
    v = doctor(device="ane", out=False)
    r = v["results"]
    assert r["dynamic"]["verdict"] == "works" and r["dynamic"]["budget_used"] == 0
    assert r["recompile"]["verdict"] == "works" and r["recompile"]["compiles"] == 1
    assert r["delta_reload"]["verdict"] == "no effect" and r["delta_reload"]["budget_free"]
    assert r["delta_patch"]["verdict"] == "works" and r["delta_patch"]["hidden_compiles"] == 1
    s = info()["stats"]  # the probes ran the device's own recipes
    assert s["reload_probes"] - d["reload_probes"] == 1 and s["patch_probes"] - d["patch_probes"] == 1
    assert v["routes"] == {"inmemory": {"verdict": "works", "error": None}, "client": {"verdict": "works", "error": None}}
    assert v["allowed"] == ["dynamic", "recompile"]
    assert os.path.basename(doctor.cache_path(v["machine"])).endswith("-fake.json")
    assert doctor.allowed_strategies("ane", announce=False) == ["dynamic", "recompile"]
    assert doctor.verified_delta("ane")[0] is None


def test_a_compile_keeps_about_one_copy_of_the_weights_besides_the_device():
    # 40 MB of weights. Kept after the compile: the descriptor's NSData (the framework's own copy) and
    # the fake device's program (snapshot + packed conv weight: aned's, outside the process on a Mac).
    # Before the backend kept only the simulator's checks it also held a simulator plan (2 copies), the
    # Program and the ANE model their own copies: ~7 copies in all.
    r = run_python("""
        import numpy as np, orion
        from runtime_programs import linear_program, weight_blob
        def rss():
            return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")) * 1024
        c = 4480
        blob = weight_blob((np.random.default_rng(0).standard_normal((c, c, 1, 1)) * 0.01).astype(np.float16))
        before = rss()
        p = orion.compile_mil(linear_program(cin=c, cout=c, s=64), {"@model_path/weights/w.bin": blob}, device="ane")
        print((rss() - before) / len(blob))
        p.release()
    """)
    assert r.returncode == 0, r.stderr
    copies = float(r.stdout.strip().splitlines()[-1])
    assert copies < 3.5, f"an ANE compile grew the process by {copies:.1f}x its weights"


def test_no_probe_side_channel_is_left():
    assert "error" in doctor.ane_control("patch-next")


def test_compile_keeps_no_simulator_plan(fake):
    # The backend validates with the simulator's checks but keeps no plan: the cost estimate and the
    # warnings still come from them (a C26 working set beyond the ANE SRAM is still reported).
    import warnings as w
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        p = orion.compile_mil(linear_program(cin=3072, cout=3072, s=2048), device="ane",
                              weights={KEY: weight_blob(rand((3072, 3072, 1, 1), 32, 0.01))})
    with orion.compile_mil(linear_program(cin=3072, cout=3072, s=2048), device="sim",
                           weights={KEY: weight_blob(rand((3072, 3072, 1, 1), 32, 0.01))}) as s:
        assert p.cost == s.cost and p.cost["weight_bytes"] >= 3072 * 3072 * 2
    assert any("C26" in str(c.message) for c in caught)
    p.release()


def test_fake_self_test():
    """The fake's checks are live: each rule broken on purpose is noticed (tests/ane_fake/fake_selftest.m)."""
    lib = os.environ["ORION_ANE_FRAMEWORK_PATH"]
    exe = os.path.join(os.path.dirname(lib), "orion_ane_fake_selftest")
    r = subprocess.run([exe, lib], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "FAIL" not in r.stdout and r.stdout.count("ok ") >= 18
