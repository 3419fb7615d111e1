"""Handles on the ANE backend's diagnostics hook and on the Linux fake framework (tests/ane_fake).

The backend exports ``orion_ane_control`` from the ``_native`` module (src/orion_native/ane/ane_api.h);
the fake exports ``ane_fake_report``/``ane_fake_reset``/``ane_fake_set_budget``/``ane_fake_set``. Both
are read with ctypes, so no binding is needed.
"""

from __future__ import annotations

import ctypes
import json
import os

FAKE_PATH_ENV = "ORION_ANE_FRAMEWORK_PATH"


def ane_info() -> dict | None:
    """The backend's "info" record, or None when this orion has no ANE backend built in."""
    from orion.cli import doctor

    return doctor.ane_control("info")


def ane_available() -> bool:
    import orion

    return any(d["name"] == "ane" and d["available"] for d in orion.devices())


def is_fake() -> bool:
    info = ane_info()
    return bool(info and info.get("fake"))


def real_ane() -> bool:
    """A real Neural Engine: the backend is built, available, and not the Linux fake."""
    return ane_available() and not is_fake()


class Fake:
    """The fake AppleNeuralEngine loaded by the backend (same shared object, found by its path)."""

    def __init__(self, path: str | None = None):
        path = path or os.environ.get(FAKE_PATH_ENV)
        if not path:
            raise RuntimeError(f"{FAKE_PATH_ENV} is not set")
        self.lib = ctypes.CDLL(path)
        self.lib.ane_fake_report.restype = ctypes.c_char_p
        self.lib.ane_fake_reset.argtypes = [ctypes.c_int]
        self.lib.ane_fake_set_budget.argtypes = [ctypes.c_long]
        self.lib.ane_fake_set.argtypes = [ctypes.c_char_p, ctypes.c_long]
        self.lib.ane_fake_set.restype = ctypes.c_int

    def report(self) -> dict:
        return json.loads(self.lib.ane_fake_report().decode())

    def violations(self) -> list[str]:
        r = self.report()
        v = list(r["violations"])
        if r["surface_violations"]:
            v.append(f"IOSurface shim: {r['surface_violations']} violation(s), last: {r['last_surface_violation']}")
        return v

    def reset(self, clear_cache: bool = False) -> None:
        self.lib.ane_fake_reset(1 if clear_cache else 0)

    def set_budget(self, n: int) -> None:
        self.lib.ane_fake_set_budget(int(n))

    def set(self, name: str, value: int) -> None:
        """Switches a fake behaviour: "id_style" (0 upstream, 1 another safe shape, 2 unsafe), "unload_no"."""
        if self.lib.ane_fake_set(name.encode(), int(value)) != 0:
            raise ValueError(f"the fake has no behaviour {name!r}")
