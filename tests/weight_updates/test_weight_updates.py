"""orion.weight_updates: the one update interface (apply) and the one probe that decides whether a
strategy works here by comparing with a fresh compile - the code both `orion doctor` and training run."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from orion import doctor, weight_updates
from orion.native.sim import Profile
from orion.native.weight_updates import WeightUpdate, apply, probe

PAPER = Profile(delta="paper")


def test_the_simulators_faithful_reload_is_not_working():
    # C07: the reload finds the identifier's compiled program; the output stays A's.
    r = probe("delta_reload", "sim")
    assert r["verdict"] == "no effect" and not r["matches_fresh"] and r["error"] is None
    assert r["budget_free"] and (r["loads"], r["unloads"], r["budget_used"]) == (1, 1, 0)


def test_the_paper_profiles_reload_is_working_through_the_same_probe():
    r = probe("delta_reload", "sim", PAPER)
    assert r["verdict"] == "works" and r["matches_fresh"] and r["budget_free"]


@pytest.mark.parametrize("profile, budget", [(None, 1), (PAPER, 0)])
def test_patch_works_and_reports_what_it_charged(profile, budget):
    r = probe("delta_patch", "sim", profile)
    assert r["verdict"] == "works" and r["budget_used"] == budget and r["hidden_compiles"] == budget
    assert r["budget_free"] == (budget == 0)


@pytest.mark.parametrize("strategy, budget", [("dynamic", 0), ("recompile", 1)])
def test_the_proven_strategies_work(strategy, budget):
    r = probe(strategy, "sim")
    assert r["verdict"] == "works" and r["budget_used"] == budget and r["ms"] >= 0


def test_a_probe_that_raises_is_an_error_verdict(monkeypatch):
    def broken(prog, weights):
        raise orion.WeightUpdateError("the device refused")
    monkeypatch.setattr(orion.native.runtime.Program, "delta_reload", broken)
    r = probe("delta_reload", "sim")
    assert r["verdict"] == "error" and "the device refused" in r["error"] and not r["budget_free"]


def test_apply_dispatches_and_reports():
    prog = orion.compile_mil(weight_updates.dynamic_mil(), device="sim")
    w = np.zeros((1, 1, weight_updates.C, weight_updates.C), np.float16)
    u = apply(prog, "dynamic", {"w1": w, "w2": w})
    assert u == WeightUpdate("dynamic", weight_writes=2) and u.budget_free
    with pytest.raises(orion.InputError, match="unknown weight-update strategy 'delta'"):
        apply(prog, "delta", {})
    prog.release()


def test_doctor_runs_this_probe_for_every_strategy(monkeypatch):
    calls = []
    real = weight_updates.probe

    def spy(strategy, device, profile=None, **kw):
        calls.append((strategy, device, profile))
        return real(strategy, device, profile, **kw)
    monkeypatch.setattr(weight_updates, "probe", spy)
    v = doctor.run("sim", profile=PAPER, out=False, write_cache=False)
    assert calls == [(s, "sim", PAPER) for s in weight_updates.STRATEGIES]
    assert v["results"]["delta_reload"]["verdict"] == "works"
    assert v["machine"] == doctor.machine("sim", PAPER) and v["machine"]["ane"] == "m4-paper"
