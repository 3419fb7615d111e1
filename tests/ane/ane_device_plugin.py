"""pytest plugin: run a test suite (tests/runtime) on device="ane" through the Linux fake framework.

    ORION_TEST_DEVICE=ane ORION_ANE_FRAMEWORK_PATH=.../libAppleNeuralEngine.so PYTHONPATH=python:BUILD:tests \
        python -m pytest -p ane.ane_device_plugin tests/runtime tests/ane

(scripts/test_ane_fake.sh does exactly this; tests/ must be on sys.path.) With the fake available,
device="auto" resolves to the ANE, so the suite's own compile_mil calls go through the Objective-C++
backend and the fake. The plugin also
  * points orion.sim's budget helpers at the "ane" backend's budget (the suite checks the budget that
    way), and lifts the fake's own 119-compile budget for the whole run;
  * fails any test after which the fake logged a contract violation (MIL as NSString, nil weights,
    QoS != 21, folder not pre-populated, bad surfaces, release while loaded, use after release, ...);
  * marks the few tests whose expectation is simulator-only, each with the reason.
Without ORION_TEST_DEVICE=ane it does nothing.
"""

from __future__ import annotations

import os

import pytest

ACTIVE = os.environ.get("ORION_TEST_DEVICE") == "ane"

# test name (or file) -> why the ANE backend legitimately differs from the simulator there.
DEVICE_DELTA = ("the profile's delta behaviour is a simulator setting; on the ANE backend the delta recipes run on "
                "the (fake) device, which says nothing about C07 and shares a model it already holds - see "
                "test_ane_contract.py")
SIM_ONLY = {
    "test_delta_reload_takes_effect_under_paper_profile":
        "the 'paper' profile is a simulator setting; on the ANE backend delta_reload really reloads the same "
        "model object, and the (fake) daemon keeps the baked weights (C07) - see test_ane_contract.py",
    "test_delta_reload_has_no_effect_on_hardware_profile": DEVICE_DELTA,
    "test_delta_patch_is_a_charged_hidden_compile_on_hardware_profile": DEVICE_DELTA,
    "test_delta_patch_is_free_under_paper_profile": DEVICE_DELTA,
    "test_unknown_device_and_missing_ane_are_clear": "expects device='ane' to be unavailable; here it is the fake",
    "test_repr_names_io": "asserts that the repr names the 'sim' device",
}
HEAP = ("binds plain heap Surfaces (orion._native.Surface), which ANE programs reject by design (InputError); "
        "test_ane_contract.py repeats the checks with IOSurfaces")


def pytest_configure(config):
    if not ACTIVE:
        return
    import orion
    import orion.native.sim
    from orion import _native

    ane = next((d for d in orion.devices() if d["name"] == "ane"), None)
    if not ane or not ane["available"]:
        raise pytest.UsageError(f"ORION_TEST_DEVICE=ane but the ANE backend is unavailable: {ane}")

    def compile_budget():
        return tuple(_native.budget("ane"))

    def set_compile_budget(limit):
        _native.set_budget_limit("ane", int(limit))
        _native.set_budget_limit("sim", int(limit))

    def reset_compile_budget():
        _native.reset_budget("ane")
        _native.reset_budget("sim")

    orion.sim.compile_budget = compile_budget
    orion.sim.set_compile_budget = set_compile_budget
    orion.sim.reset_compile_budget = reset_compile_budget
    from .fake_hooks import Fake

    Fake().set_budget(10**9)


def pytest_collection_modifyitems(config, items):
    if not ACTIVE:
        return
    import inspect

    for item in items:
        reason = SIM_ONLY.get(item.name.split("[")[0])
        if reason is None and "tests/runtime/" in item.nodeid.replace("\\", "/"):
            try:
                src = inspect.getsource(item.function)
            except (OSError, TypeError):
                src = ""
            if "Surface(" in src:
                reason = HEAP
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"ANE backend: {reason}"))


@pytest.fixture(autouse=True)
def _fake_contract_clean():
    if not ACTIVE:
        yield
        return
    from .fake_hooks import Fake

    fake = Fake()
    before = fake.report()
    yield
    after = fake.report()
    new = after["violations"][len(before["violations"]):]
    if after["surface_violations"] > before["surface_violations"]:
        new.append(f"IOSurface shim: {after['last_surface_violation']}")
    if new:
        pytest.fail("the ANE backend broke the framework contract:\n  " + "\n  ".join(new), pytrace=False)
