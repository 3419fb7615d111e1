"""Constants shared by C++ and Python are defined once, in the native core (sim/profile.h and the
constraint catalog), and every Python default reads them."""

from orion import _native, sim
from orion.compiler.driver import _resolve_target
from orion.compiler.passes.context import CompileOptions


def test_python_defaults_come_from_the_native_core():
    d = _native.sim_defaults()
    assert sim.CHIPS == tuple(d["chips"]) and sim.LEGACY_CHIPS == tuple(d["legacy_chips"])
    p, o, lim = sim.Profile(), CompileOptions(), sim.catalog_limits()
    assert p.min_surface_bytes == o.min_surface_bytes == d["min_surface_bytes"] == lim["min_surface_bytes"] == 49152
    assert p.compile_budget == d["compile_budget"] == lim["compile_budget"] == 119
    assert o.max_axis == lim["max_axis"] and o.max_weight_files == lim["max_weight_tensors"]
    assert p.chip == d["default_chip"]
    assert {c: sim.dialect_for(c) for c in sim.CHIPS} == {c: "ios16" if c in ("m1", "m2") else "ios18" for c in sim.CHIPS}
    assert _resolve_target("sim", None, sim.Profile(chip="m2")) == ("ios16", "m2")
