"""On the default path the ANE backend does only what code known to run on M4/M5 does, and every extra
check warns instead of refusing (docs/ane-framework.md). Each test pins one
point down through the Linux fake framework (tests/ane_fake), which is switched into the behaviour a
real Mac might show: identifiers of another shape, device-info getters that raise or answer odd types,
unloads that answer NO; and which checks that CPU access to IOSurfaces happens under a lock, that
weights/ exists, and that no request built before a load is evaluated after it. The remaining
differences from working code are listed in tests/ane/README.md."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

import orion
from orion import _native, doctor
from orion.native.sim import Profile
from runtime_programs import HEADER, add_program, linear_program, rand, t, weight_blob

from .test_ane_contract import ID_RE, KEY, info, run_python, temp_ids

pytestmark = pytest.mark.ane_fake

UNVERIFIED = "unverified (known to fail on M4 Max)"


@pytest.fixture
def behaviour(fake):
    """``behaviour("unload_no", 1)`` switches a fake behaviour for this test only."""
    switched = []

    def switch(name, value):
        fake.set(name, value)
        switched.append(name)
    yield switch
    for name in switched:
        fake.set(name, 0)


def two_weight_program(c=64, s=256):
    """y = W2 (W1 x): two BLOBFILE weights, w1.bin and w2.bin."""
    wt, xt = t("fp16", (c, c, 1, 1)), t("fp16", (1, c, 1, s))
    conv = ("conv(dilations = dl, groups = gr, pad = pd, pad_type = pt, strides = st, weight = {w}, x = {x})"
            '[name = string("{o}")]')
    return (HEADER + f"    func main<ios18>({xt} x) {{\n"
            '        string pt = const()[name = string("pt"), val = string("valid")];\n'
            '        tensor<int32, [2]> st = const()[name = string("st"), val = tensor<int32, [2]>([1, 1])];\n'
            '        tensor<int32, [4]> pd = const()[name = string("pd"), val = tensor<int32, [4]>([0, 0, 0, 0])];\n'
            '        tensor<int32, [2]> dl = const()[name = string("dl"), val = tensor<int32, [2]>([1, 1])];\n'
            '        int32 gr = const()[name = string("gr"), val = int32(1)];\n'
            + "".join(f'        {wt} w{i} = const()[name = string("w{i}"), val = {wt}(BLOBFILE(path = '
                      f'string("@model_path/weights/w{i}.bin"), offset = uint64(64)))];\n' for i in (1, 2))
            + f"        {xt} h = {conv.format(w='w1', x='x', o='h')};\n"
            + f"        {xt} y = {conv.format(w='w2', x='h', o='y')};\n"
            "    } -> (y);\n}\n")


# ---- 1. identifier: any single safe folder name ------------------------------------------------------

def test_an_identifier_of_another_shape_is_used_logged_once_and_cleaned_up(tmp_path):
    script = """
        import json, os, numpy as np, orion
        from orion import doctor
        from runtime_programs import add_program, linear_program, rand, weight_blob
        w = rand((128, 64, 1, 1), 1, 0.1)
        x = rand((1, 64, 1, 256), 2)
        kept = orion.compile_mil(linear_program(), {"@model_path/weights/w.bin": weight_blob(w)}, device="ane")
        with orion.compile_mil(linear_program(), {"@model_path/weights/w.bin": weight_blob(w)}, device="sim") as s:
            same = bool(np.array_equal(kept(x=x)["y"], s(x=x)["y"]))
        free = orion.compile_mil(add_program(), device="ane")
        temp = doctor.ane_control("info")["temp_dir"]
        ids = sorted(m.rsplit(".", 1)[0] for m in os.listdir(os.path.join(temp, "orion-ane-owners")))
        print(json.dumps({"temp": temp, "same": same, "ids": ids,
                          "files": {i: sorted(os.listdir(os.path.join(temp, i))) for i in ids}}))
    """
    r = run_python(script, TEMP=str(tmp_path), ORION_ANE_FAKE_ID_STYLE="1")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["same"] and len(out["ids"]) == 2
    for i in out["ids"]:
        assert re.fullmatch(r"[0-9a-f]{32}-[0-9a-f]{32}-[0-9a-f]{8}", i) and not ID_RE.match(i)
        assert {"model.mil", "weights"} <= set(out["files"][i])
    assert r.stderr.count("hexStringIdentifier] returned") == 1  # logged once per process
    assert "not the <64 hex>_<64 hex>_<64 hex> shape" in r.stderr
    left = [n for n in os.listdir(out["temp"]) if n in out["ids"] or n == "orion-ane-owners"]
    assert left == []  # removed at exit like upstream-shaped folders
    # Crash hygiene works for any shape: a dead process's folder (with our marker) goes at start-up.
    stale = "0123abcd-stale"
    os.makedirs(os.path.join(out["temp"], stale, "weights"))
    os.makedirs(os.path.join(out["temp"], "orion-ane-owners"))
    open(os.path.join(out["temp"], "orion-ane-owners", stale + ".999999999"), "w").close()
    r = run_python(script, TEMP=str(tmp_path), ORION_ANE_FAKE_ID_STYLE="1")
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(os.path.join(out["temp"], stale))


def test_an_unsafe_identifier_is_refused_before_touching_the_file_system(fake, behaviour):
    behaviour("id_style", 2)  # "../orion-escape-<hex>"
    temp = info()["temp_dir"]
    before = set(os.listdir(os.path.dirname(temp)))
    with pytest.raises(orion.OrionError, match=r"not a single safe folder name .*no '/', no '\.\.'"):
        orion.compile_mil(add_program(shape=(1, 256, 1, 80)), device="ane")
    assert set(os.listdir(os.path.dirname(temp))) == before
    assert not [n for n in os.listdir(temp) if "escape" in n]


# ---- 2. device info: best effort, reported by `orion info` ----------------------------------------------

def test_odd_device_info_getters_only_warn_and_orion_info_reports_them():
    r = run_python("""
        import json, orion
        from orion import doctor
        from orion.cli import main
        from runtime_programs import add_program, rand
        ane = next(d for d in orion.devices() if d["name"] == "ane")
        a = rand((1, 256, 1, 128), 3)
        with orion.compile_mil(add_program(), device="ane") as p:
            z = p(a=a, b=a)["z"]
        i = doctor.ane_control("info")
        print(json.dumps({"ane": ane, "warnings": i["warnings"], "missing": i["missing_optional"],
                          "device": i["device"], "ok": bool((z == a + a).all())}))
        main(["info"])
    """, ORION_ANE_FAKE_DEVICE_INFO="odd")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    out = json.loads(next(line for line in lines if line.startswith("{")))
    assert out["ane"]["available"] and out["ane"]["reason"] == "" and out["ok"]
    w = "\n".join(out["warnings"])
    assert "+[_ANEDeviceInfo aneSubType] raised NSInternalInconsistencyException" in w
    assert "+[_ANEDeviceInfo aneArchitectureType] returned a" in w and "not an NSString" in w
    assert "+[_ANEDeviceInfo numANECores] declares return type 'd'" in w
    assert "+[_ANEDeviceInfo hasANE] gave no answer" in w
    assert "+[_ANEDeviceInfo hasANE]" in out["missing"]
    d = out["device"]
    assert d["has_ane"] is None and d["subtype"] == "" and d["architecture"] == "" and d["num_cores"] == 0
    assert d["num_anes"] == 1 and d["os_build"] == "FAKE0"  # the getters that work still report
    assert sum(line.strip().startswith("warning: +[_ANEDeviceInfo") for line in lines) == 4


# ---- 3. reload: requests rebuilt, an unload NO is logged and not fatal ---------------------------------

def test_reload_builds_a_new_request(fake, ane_stats):
    # The fake logs a violation when a request built before the last load is evaluated after it.
    x = rand((1, 64, 1, 256), 4)
    p = orion.compile_mil(linear_program(), {KEY: weight_blob(rand((128, 64, 1, 1), 5, 0.1))}, device="ane")
    d = ane_stats()
    y = p(x=x)["y"]
    assert p.delta_reload({KEY: weight_blob(rand((128, 64, 1, 1), 6, 0.1))}).loads == 1
    np.testing.assert_array_equal(p(x=x)["y"], y)  # the daemon keeps the baked weights (C07)
    assert d()["requests_built"] == 2 and d()["unloads"] == 1
    p.release()


def test_an_unload_answering_no_is_logged_and_the_reload_continues(fake, behaviour, ane_stats, capfd):
    x = rand((1, 64, 1, 256), 7)
    p = orion.compile_mil(linear_program(), {KEY: weight_blob(rand((128, 64, 1, 1), 8, 0.1))}, device="ane")
    y = p(x=x)["y"]
    behaviour("unload_no", 1)
    d = ane_stats()
    assert p.delta_reload({KEY: weight_blob(rand((128, 64, 1, 1), 9, 0.1))}).unloads == 1
    np.testing.assert_array_equal(p(x=x)["y"], y)
    s = d()
    assert s["unload_failures"] == 1 and s["loads"] == 1 and s["cleanup_errors"] == 0
    err = capfd.readouterr().err
    assert "orion: reloading ANE model" in err and "continuing" in err
    assert "-[_ANEInMemoryModel unloadWithQoS:21 error:&error]" in err
    assert "returned NO: NSError domain=com.apple.appleneuralengine code=5" in err
    p.release()


def test_an_unload_answering_no_at_release_still_removes_the_folder(fake, behaviour, ane_stats, capfd):
    before = temp_ids()
    p = orion.compile_mil(add_program(shape=(1, 256, 1, 72)), device="ane")
    (new,) = temp_ids() - before
    behaviour("unload_no", 1)
    d = ane_stats()
    p.release()
    _native.shutdown()  # what interpreter exit does
    assert new not in temp_ids() and d()["cleanup_errors"] >= 1
    assert "orion: releasing ANE model" in capfd.readouterr().err


# ---- 4. the _ANEClient route: reported unverified ------------------------------------------------------

def test_the_client_route_is_reported_unverified(fake, capsys):
    ane = next(d for d in orion.devices() if d["name"] == "ane")
    assert ane["routes"] == {"inmemory": "usable", "client": UNVERIFIED}
    routes = info()["routes"]
    assert routes["client_selectors"] and routes["client"] == UNVERIFIED and info()["route"] == "inmemory"
    assert next(d for d in doctor.device_info() if d["name"] == "ane")["routes"]["client"] == UNVERIFIED
    from orion.cli import main

    main(["info"])
    out = capsys.readouterr().out
    assert f"route client: {UNVERIFIED}" in out and "route inmemory: usable" in out


# ---- 5. weight entries: the working code's literal -------------------------------------------------------

def test_weight_entries_are_the_working_code_literal(fake):
    blob = weight_blob(rand((128, 64, 1, 1), 10, 0.1))
    with orion.compile_mil(linear_program(), {KEY: blob}, device="ane"):
        # Keys in enumeration order: the framework takes the first value, which must be the blob.
        assert fake.report()["last_weight_entry"] == f"data:NSData {len(blob)} B, offset:NSNumber 0"


# ---- 6. IOSurface CPU access under lock --------------------------------------------------------------------

def test_cpu_access_to_surfaces_happens_under_a_lock(fake):
    # The IOSurface shim fingerprints every surface when its last lock is released and logs a violation
    # when the bytes changed before the next lock; the fake device needs the surfaces unlocked. Zero-copy
    # writes and reads through numpy views, the runtime's own copies, several evaluations: no violation.
    surfaces = fake.report()["surface_violations"]
    a, b = rand((1, 256, 1, 128), 11), rand((1, 256, 1, 128), 12)
    with orion.compile_mil(add_program(), device="ane") as p:
        p.input_surface("a").view("fp16", [1, 256, 1, 128])[...] = a
        p.input_surface("b").view("fp16", [1, 256, 1, 128])[...] = b
        p.eval()
        z = np.array(p.output_surface("z").view("fp16", [1, 256, 1, 128]))
        np.testing.assert_array_equal(p(a=b, b=a)["z"], z)
        p.bind_input("b", p.output_surface("z"))  # one surface as input and output: unlocked once
        p.eval()
    assert fake.report()["surface_violations"] == surfaces


# ---- 7. weights/ always; the patch path says which blob becomes "data" --------------------------------------

def test_weight_free_programs_get_a_weights_folder(fake):
    before = temp_ids()
    with orion.compile_mil(add_program(shape=(1, 256, 1, 88)), device="ane"):
        (new,) = temp_ids() - before
        folder = os.path.join(info()["temp_dir"], new, "weights")
        assert os.path.isdir(folder) and os.listdir(folder) == []


def test_the_patch_probe_with_several_weights_says_which_blob_becomes_data(fake, capfd):
    blobs = {f"@model_path/weights/w{i}.bin": weight_blob(rand((64, 64, 1, 1), 12 + i, 0.1)) for i in (1, 2)}
    new_blobs = {k: weight_blob(rand((64, 64, 1, 1), 20 + i, 0.1)) for i, k in enumerate(blobs)}
    p = orion.compile_mil(two_weight_program(), blobs, device="ane")
    before = temp_ids()
    p.delta_patch(new_blobs)
    (new,) = temp_ids() - before
    err = capfd.readouterr().err
    m = re.search(r"delta-patch probe \(W4\) with 2 weight files: 'data' = '([^']+)'", err)
    assert m and m.group(1) in new_blobs
    with open(os.path.join(info()["temp_dir"], new, "data"), "rb") as f:
        assert f.read() == new_blobs[m.group(1)]
    x = rand((1, 64, 1, 256), 30)
    with orion.compile_mil(two_weight_program(), new_blobs, device="sim") as s:
        np.testing.assert_array_equal(p(x=x)["y"], s(x=x)["y"])
    p.release()


# ---- failures name the exact call, its arguments' shapes and the NSError -----------------------------------

def test_an_eval_failure_names_the_call_the_request_shape_and_the_nserror(fake):
    fake.expect(1)  # the (fake) hardware rejects 8 KB surfaces: status 0x1d
    with orion.compile_mil(add_program(shape=(1, 64, 1, 64)), device="ane", profile=Profile(min_surface_bytes=512)) as p:
        a = rand((1, 64, 1, 64), 31)
        with pytest.raises(orion.EvalError) as e:
            p(a=a, b=a)
    msg = str(e.value)
    assert ("-[_ANEInMemoryModel evaluateWithQoS:21 options:@{} request:_ANERequest{inputs: 2 x _ANEIOSurfaceObject "
            "[8192 B, 8192 B], indices [0, 1]; outputs: 1 x _ANEIOSurfaceObject [8192 B], indices [0]; weightsBuffer: "
            "nil, perfStats: nil, procedureIndex: @0} error:&error]") in msg
    assert "NSError domain=com.apple.appleneuralengine code=8" in msg


def test_orion_doctor_prints_errors_in_full(capsys):
    call = "-[_ANEInMemoryModel loadWithQoS:21 options:@{} error:&error] (model 0123456789ABCDEF...) returned NO: " + \
           "NSError domain=com.apple.appleneuralengine code=5 description=\"" + "x" * 400 + "\""
    r = {"verdict": "error", "ms": None, "budget_used": None, "error": f"OrionError: {call}"}
    verdict = {"machine": {"device": "ane", "ane": "h16g", "chip": "Apple M4 Max", "os_build": "25D2128"},
               "results": {s: r for s in doctor.STRATEGIES}, "allowed": [],
               "routes": {"inmemory": {"verdict": "works", "error": None}, "client": {"verdict": "error", "error": call}}}
    doctor.print_table(verdict)
    out = capsys.readouterr().out
    assert out.count(call) == len(doctor.STRATEGIES) + 1
