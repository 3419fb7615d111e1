"""orion doctor on the simulator: the probes, the hardware-faithful verdicts, the cache and the rule
that picks the weight-update strategies (orion.weight_updates)."""

import argparse
import json
import logging
import os

import pytest

import orion
from orion import doctor, weight_updates
from orion.cli.doctor import add_doctor_parser


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_CACHE_DIR", str(tmp_path / "cache"))
    weight_updates._announced.clear()
    yield tmp_path / "cache"


@pytest.fixture(scope="module")
def sim_verdict(tmp_path_factory):
    old = os.environ.get("ORION_CACHE_DIR")
    os.environ["ORION_CACHE_DIR"] = str(tmp_path_factory.mktemp("doctor-cache"))
    try:
        return doctor(device="sim", out=False, write_cache=False)
    finally:
        if old is None:
            del os.environ["ORION_CACHE_DIR"]
        else:
            os.environ["ORION_CACHE_DIR"] = old


def test_simulator_reports_the_hardware_faithful_verdicts(sim_verdict):
    r = sim_verdict["results"]
    assert r["dynamic"]["verdict"] == "works" and r["dynamic"]["budget_used"] == 0
    assert r["recompile"]["verdict"] == "works" and r["recompile"]["budget_used"] == 1
    # delta_reload: the reload finds the identifier's compiled program (C07).
    assert r["delta_reload"]["verdict"] == "no effect" and not r["delta_reload"]["matches_fresh"]
    # delta_patch: equal to a fresh compile because it is one (a hidden compile, charged).
    assert r["delta_patch"]["verdict"] == "works" and r["delta_patch"]["budget_used"] == 1
    assert not r["delta_patch"]["budget_free"]
    assert sim_verdict["allowed"] == ["dynamic", "recompile"]
    assert sim_verdict["machine"]["device"] == "sim" and sim_verdict["routes"] is None
    for s in doctor.STRATEGIES:
        assert r[s]["error"] is None and r[s]["ms"] >= 0


def test_table_lists_every_strategy(sim_verdict, capsys):
    doctor.print_table(sim_verdict)
    out = capsys.readouterr().out
    assert "simulator" in out and "hardware-faithful" in out
    for s in doctor.STRATEGIES:
        assert s in out
    assert "no effect" in out and "allowed: dynamic -> recompile" in out


def test_verdict_cached_per_machine_atomically(_cache):
    v = doctor(device="sim", out=False)
    path = doctor.cache_path(doctor.machine("sim"))
    assert os.path.dirname(path) == str(_cache)
    with open(path) as f:
        on_disk = json.load(f)
    assert on_disk["results"] == json.loads(json.dumps(v["results"]))
    assert on_disk["version"] == doctor.CACHE_VERSION and on_disk["machine"]["device"] == "sim"
    assert doctor.cached_verdict("sim")["allowed"] == ["dynamic", "recompile"]
    assert [p for p in os.listdir(_cache) if p.endswith(".tmp")] == []


def test_paper_profile_gets_its_own_cache_entry_and_allows_the_reload(_cache):
    old = orion.sim.set_profile(delta="paper")
    try:
        v = doctor(device="sim", out=False)
        assert v["results"]["delta_reload"]["verdict"] == "works"
        r = v["results"]
        assert r["delta_reload"]["budget_free"]
        # Allowed exactly when it was also cheaper than recompile on this run.
        assert ("delta_reload" in v["allowed"]) == (r["delta_reload"]["ms"] < r["recompile"]["ms"])
        assert doctor.cache_path(doctor.machine("sim")).endswith("-paper.json")
    finally:
        orion.sim.set_profile(old)
    assert doctor.cached_verdict("sim") is None  # the hardware profile's entry was never written


def _verdict(**results):
    base = {s: {"verdict": "works", "ms": 1.0, "budget_used": 0, "budget_free": True} for s in doctor.STRATEGIES}
    base["recompile"].update(ms=30.0, budget_used=1, budget_free=False)
    for s, r in results.items():
        base[s].update(r)
    return {"version": doctor.CACHE_VERSION, "machine": doctor.machine("sim"), "results": base}


@pytest.mark.parametrize("results, allowed", [
    ({}, ["dynamic", "delta_patch", "delta_reload", "recompile"]),
    ({"dynamic": {"verdict": "error"}}, ["delta_patch", "delta_reload", "recompile"]),
    ({"delta_reload": {"verdict": "no effect"}}, ["dynamic", "delta_patch", "recompile"]),
    ({"delta_patch": {"budget_used": 1, "budget_free": False}}, ["dynamic", "delta_reload", "recompile"]),
    ({"delta_patch": {"ms": 31.0}, "delta_reload": {"verdict": "wrong"}}, ["dynamic", "recompile"]),
    ({"recompile": {"verdict": "error", "ms": None}}, ["dynamic"]),  # "cheaper than recompile" unprovable
    ({"dynamic": {"verdict": "error"}, "recompile": {"verdict": "error", "ms": None}}, []),
])
def test_rule(results, allowed):
    assert doctor.allowed_strategies("sim", _verdict(**results), announce=False) == allowed


def test_without_a_verdict_only_the_proven_strategies(caplog):
    with caplog.at_level(logging.INFO, logger="orion"):
        assert doctor.allowed_strategies("sim") == ["dynamic", "recompile"]
        assert doctor.allowed_strategies("sim") == ["dynamic", "recompile"]
    lines = [r.getMessage() for r in caplog.records if "weight updates" in r.getMessage()]
    assert len(lines) == 1  # announced once, in one line
    assert "dynamic -> recompile" in lines[0] and "run `orion doctor`" in lines[0]


def test_announcement_names_why_each_strategy_is_skipped(sim_verdict, caplog):
    with caplog.at_level(logging.INFO, logger="orion"):
        doctor.allowed_strategies("sim", sim_verdict)
    (line,) = [r.getMessage() for r in caplog.records if "weight updates" in r.getMessage()]
    assert "delta_reload: no effect" in line and "delta_patch: charges the compile budget" in line


def test_corrupt_cache_is_ignored(_cache):
    path = doctor.cache_path(doctor.machine("sim"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("{not json")
    assert doctor.cached_verdict("sim") is None
    assert doctor.allowed_strategies("sim", announce=False) == ["dynamic", "recompile"]


def _cli(argv):
    p = argparse.ArgumentParser(prog="orion")
    sub = p.add_subparsers(dest="command")
    add_doctor_parser(sub)
    args = p.parse_args(argv)
    return args.func(args)


def test_cli(capsys):
    assert _cli(["doctor", "--device", "sim", "--cached"]) == 1
    assert "no cached verdict" in capsys.readouterr().out
    assert _cli(["doctor", "--device", "sim", "--json"]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["allowed"] == ["dynamic", "recompile"]
    assert _cli(["doctor", "--device", "sim", "--cached"]) == 0
    assert "allowed: dynamic -> recompile" in capsys.readouterr().out
    assert _cli(["doctor", "--devices"]) == 0
    devs = json.loads(capsys.readouterr().out)
    assert devs[0]["name"] == "sim" and "compile_budget" in devs[0]


def test_orion_doctor_is_callable_and_has_the_helpers():
    assert callable(doctor) and callable(doctor.allowed_strategies)
    assert doctor.STRATEGIES == ("dynamic", "recompile", "delta_reload", "delta_patch")
