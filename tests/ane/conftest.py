"""tests/ane: the ANE backend.

* test_ane_contract.py runs through the Linux fake framework (tests/ane_fake) and checks the backend
  against the documented contract. With ORION_TEST_DEVICE=ane (scripts/test_ane_fake.sh) the fake must
  be loadable, otherwise these tests fail; without it they skip when no fake is loaded.
* test_ane_hardware.py is marked ``ane``: it runs only on a real Neural Engine (``orion.devices()`` says
  "ane" is available and it is not the fake); see README.md for the one command to run it on a Mac.
"""

from __future__ import annotations

import os
import sys

import pytest

RUNTIME = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime"))
if RUNTIME not in sys.path:
    sys.path.insert(0, RUNTIME)  # runtime_programs: the runtime suite's MIL programs

from .fake_hooks import Fake, ane_available, is_fake, real_ane  # noqa: E402

TEST_DEVICE = os.environ.get("ORION_TEST_DEVICE", "")
# Developer aid: ORION_ANE_HW_ON_FAKE=1 also runs the hardware tests against the fake (checks the tests
# themselves off-device; scripts/test_ane_fake.sh sets it). Never evidence about a real ANE.
HW_ON_FAKE = os.environ.get("ORION_ANE_HW_ON_FAKE") == "1"


def pytest_collection_modifyitems(config, items):
    fake = ane_available() and is_fake()
    hw = real_ane() or (HW_ON_FAKE and fake)
    if TEST_DEVICE == "ane" and not (fake or real_ane()) and any(i.get_closest_marker("ane_fake") for i in items):
        raise pytest.UsageError("ORION_TEST_DEVICE=ane but no ANE backend is available (the fake is loaded by "
                                "scripts/test_ane_fake.sh through ORION_ANE_FRAMEWORK_PATH)")
    for item in items:
        if item.get_closest_marker("ane") and not hw:
            item.add_marker(pytest.mark.skip(reason="needs a real Apple Neural Engine (see tests/ane/README.md)"))
        if item.get_closest_marker("ane_fake") and not fake:
            item.add_marker(pytest.mark.skip(reason="needs the fake ANE build: scripts/test_ane_fake.sh"))


def pytest_configure(config):
    config.addinivalue_line("markers", "ane_fake: runs the ANE backend against the Linux fake framework")


@pytest.fixture
def fake():
    """The fake framework; fails the test if the backend broke the contract during it. Tests that
    provoke a violation on purpose call ``fake.expect(n)`` first."""
    f = Fake()
    before = f.report()
    f.expected = 0
    f.expect = lambda n=1: setattr(f, "expected", f.expected + n)
    yield f
    after = f.report()
    new = after["violations"][len(before["violations"]):]
    if after["surface_violations"] > before["surface_violations"]:
        new.append(f"IOSurface shim: {after['last_surface_violation']}")
    if len(new) != f.expected:
        pytest.fail(f"expected {f.expected} contract violation(s), the fake logged {len(new)}:\n  " + "\n  ".join(new),
                    pytrace=False)
    if f.expected:
        f.reset()  # the provoked ones must not fail the plugin's own check


@pytest.fixture
def ane_stats():
    """Deltas of the backend's counters: ``d = ane_stats(); ...; d()["framework_compiles"]``."""
    from orion.cli import doctor

    def start():
        before = doctor.ane_control("info")["stats"]
        return lambda: {k: v - before[k] for k, v in doctor.ane_control("info")["stats"].items()}
    return start
