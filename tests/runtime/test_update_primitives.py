"""Weight-update primitives of a Program (orion.weight_updates): dynamic inputs, recompile, and the
experimental delta recipes, each reporting what the device did (compiles, loads, budget), with the
compile budget (C05) and baked weights (C07) reproduced. Whether an update works is the probe's
question: tests/weight_updates."""

import numpy as np
import pytest

import orion
from conftest import fp16_close
from orion.native.sim import Profile
from orion.native.weight_updates import WeightUpdate
from runtime_programs import dynamic_linear_program, linear_program, rand, weight_blob

KEY = "@model_path/weights/w.bin"


def ref_linear(w, x):
    return np.einsum("oi,is->os", w[:, :, 0, 0].astype(np.float64), x[0, :, 0, :].astype(np.float64))


def check_linear(prog, w, seed=11):
    x = rand((1, 64, 1, 256), seed)
    y = prog(x=x)["y"][0, :, 0, :]
    ref = ref_linear(w, x)
    fp16_close(y, ref, scale=np.abs(ref).max() * 0.02)
    return y


def test_dynamic_weights_update_with_zero_compiles():
    prog = orion.compile_mil(dynamic_linear_program())
    x = rand((1, 1, 64, 256), 1)
    before = orion.counters()
    for seed in (2, 3, 4):
        w = rand((1, 1, 64, 64), seed, 0.2)
        prog.stage("w", w)
        y = prog(x=x)["y"]
        ref = w[0, 0].astype(np.float64) @ x[0, 0].astype(np.float64)
        fp16_close(y[0, 0], ref, scale=np.abs(ref).max() * 0.02)
    after = orion.counters()
    assert after["compiles"] == before["compiles"] and after["loads"] == before["loads"]
    assert after["weight_writes"] - before["weight_writes"] == 3


def test_unstaged_input_must_be_passed():
    prog = orion.compile_mil(dynamic_linear_program())
    with pytest.raises(orion.InputError, match="missing input 'w'"):
        prog(x=rand((1, 1, 64, 256)))


def test_recompile_follows_new_weights_and_charges_budget():
    wa, wb = rand((128, 64, 1, 1), 1, 0.1), rand((128, 64, 1, 1), 2, 0.1)
    prog = orion.compile_mil(linear_program(), {KEY: weight_blob(wa)})
    check_linear(prog, wa)
    used0 = orion.sim.compile_budget()[0]
    u = prog.recompile({KEY: weight_blob(wb)})
    assert orion.sim.compile_budget()[0] == used0 + 1
    assert isinstance(u, WeightUpdate) and (u.strategy, u.budget_used, u.compiles, u.loads) == ("recompile", 1, 1, 1)
    assert not u.budget_free
    check_linear(prog, wb)


def test_delta_reload_has_no_effect_on_hardware_profile():
    wa, wb = rand((128, 64, 1, 1), 1, 0.1), rand((128, 64, 1, 1), 2, 0.1)
    prog = orion.compile_mil(linear_program(), {KEY: weight_blob(wa)})
    y_a = check_linear(prog, wa)
    with pytest.warns(orion.AneSimWarning, match="C07"):
        u = prog.delta_reload({KEY: weight_blob(wb)})
    # The report says what the device did (an unload and a load, nothing compiled) ...
    assert (u.strategy, u.unloads, u.loads, u.budget_used) == ("delta_reload", 1, 1, 0) and u.budget_free
    # ... the file in the folder did change ...
    with open(f"{prog.folder}/weights/w.bin", "rb") as f:
        assert f.read() == weight_blob(wb)
    # ... but the program still computes with the baked weights A.
    np.testing.assert_array_equal(check_linear(prog, wa), y_a)


def test_delta_reload_takes_effect_under_paper_profile():
    wa, wb = rand((128, 64, 1, 1), 1, 0.1), rand((128, 64, 1, 1), 2, 0.1)
    prog = orion.compile_mil(linear_program(), {KEY: weight_blob(wa)}, profile=Profile(delta="paper"))
    check_linear(prog, wa)
    before = orion.counters()["compiles"]
    u = prog.delta_reload({KEY: weight_blob(wb)})
    assert (u.loads, u.budget_used) == (1, 0)  # the paper's claim: no compile
    check_linear(prog, wb)
    assert orion.counters()["compiles"] == before


def test_delta_reload_rejects_different_keys():
    prog = orion.compile_mil(linear_program(), {KEY: weight_blob(rand((128, 64, 1, 1)))})
    with pytest.raises(orion.WeightUpdateError):
        prog.delta_reload({"@model_path/weights/other.bin": weight_blob(rand((128, 64, 1, 1)))})


def test_delta_patch_is_a_charged_hidden_compile_on_hardware_profile():
    wa, wb = rand((128, 64, 1, 1), 1, 0.1), rand((128, 64, 1, 1), 2, 0.1)
    prog = orion.compile_mil(linear_program(), {KEY: weight_blob(wa)})
    old_id = prog.identifier
    before = orion.counters()
    used0 = orion.sim.compile_budget()[0]
    u = prog.delta_patch({KEY: weight_blob(wb)})
    after = orion.counters()
    assert (u.hidden_compiles, u.budget_used, u.compiles) == (1, 1, 0) and not u.budget_free
    assert after["hidden_compiles"] - before["hidden_compiles"] == 1
    assert orion.sim.compile_budget()[0] == used0 + 1
    assert prog.identifier != old_id
    fresh = orion.compile_mil(linear_program(), {KEY: weight_blob(wb)})
    x = rand((1, 64, 1, 256), 9)
    np.testing.assert_array_equal(prog(x=x)["y"], fresh(x=x)["y"])


def test_delta_patch_is_free_under_paper_profile():
    wa, wb = rand((128, 64, 1, 1), 3, 0.1), rand((128, 64, 1, 1), 4, 0.1)
    prog = orion.compile_mil(linear_program(), {KEY: weight_blob(wa)}, profile=Profile(delta="paper"))
    used0 = orion.sim.compile_budget()[0]
    u = prog.delta_patch({KEY: weight_blob(wb)})
    assert u.budget_free and u.loads == 1 and orion.sim.compile_budget()[0] == used0
    check_linear(prog, wb)


def test_budget_exhaustion_is_typed_and_names_the_fix():
    orion.sim.set_compile_budget(orion.sim.compile_budget()[0] + 1)
    try:
        orion.compile_mil(linear_program(), {KEY: weight_blob(rand((128, 64, 1, 1), 40))})
        with pytest.raises(orion.BudgetExceeded) as e:
            orion.compile_mil(linear_program(), {KEY: weight_blob(rand((128, 64, 1, 1), 41))})
        assert e.value.constraint == "C05" and "dynamic" in str(e.value)
    finally:
        orion.sim.set_compile_budget(10**9)
