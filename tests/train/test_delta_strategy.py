"""Training's delta strategy: only under an `orion doctor` verdict for this machine, and it updates the
weights with the same code the doctor's probe verified (orion.weight_updates.apply)."""

from __future__ import annotations

import pytest

from orion import doctor, weight_updates
from orion.native.sim import Profile
from orion.train.errors import StrategyUnavailable
from orion.train.programs import LayerPrograms
from train_helpers import lively_params, micro_config

PAPER = Profile(delta="paper")


@pytest.fixture(autouse=True)
def _no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ORION_CACHE_DIR", str(tmp_path / "cache"))


def _delta(cfg, verdict=None, profile=None):
    return LayerPrograms(cfg, cfg.n_ctx, lively_params(cfg), "delta", "sim", profile=profile, doctor_verdict=verdict)


def test_refused_without_a_verdict():
    with pytest.raises(StrategyUnavailable, match="no cached `orion doctor` verdict"):
        _delta(micro_config())


def test_refused_when_the_probe_found_no_working_delta():
    verdict = doctor.run("sim", out=False, write_cache=False)  # hardware-faithful: reload has no effect (C07)
    assert verdict["results"]["delta_reload"]["verdict"] == "no effect"
    with pytest.raises(StrategyUnavailable, match="did not verify a delta update"):
        _delta(micro_config(), verdict)


def test_refused_with_another_machines_verdict():
    verdict = doctor.run("sim", profile=PAPER, out=False, write_cache=False)
    with pytest.raises(StrategyUnavailable, match="not for this machine"):
        _delta(micro_config(), verdict)  # a paper-profile verdict, training under the hardware profile


def test_the_cached_verdict_of_this_machine_is_used():
    doctor.run("sim", out=False)  # cached: no working delta here
    with pytest.raises(StrategyUnavailable, match="did not verify"):
        _delta(micro_config())


def test_the_update_is_the_verified_code(monkeypatch):
    cfg = micro_config()
    verdict = {"machine": doctor.machine("sim", PAPER), "results": {
        "dynamic": {"verdict": "works"}, "recompile": {"verdict": "works", "ms": 50.0},
        "delta_patch": {"verdict": "works", "budget_free": True, "ms": 1.0}}}
    progs = _delta(cfg, verdict, PAPER)
    assert progs.delta_method == "delta_patch"
    seen = []
    real = weight_updates.apply
    monkeypatch.setattr(weight_updates, "apply", lambda prog, s, w: seen.append(s) or real(prog, s, w))
    progs.update(progs.params)
    assert seen == ["delta_patch"] * progs.n_programs
    progs.release()
