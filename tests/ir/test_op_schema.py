"""The op schema is one table (the simulator's registry) and every other view of an op is derived
from it: orion.ops.schema() equals orion.sim.ops() in names and parameters in both directions, every
simulator op has a graph builder whose IR parameters are schema parameters, and the compiler's
validation, decomposition and I/O-legalisation lists are read from the schema rows."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from orion.compiler import lower
from orion.errors import CompileError
from orion.ir import OPS, Graph, ops
from orion.compiler.passes import decompose, default_pipeline, io_legalize, validate


def test_schema_equals_the_simulator_both_directions():
    mine = {r["name"]: r["params"] for r in orion.ops.schema()}
    sim = {r["name"]: r["params"] for r in orion.sim.ops()}
    assert mine == sim
    assert len(mine) == len(orion.ops.schema())          # no op listed twice


def test_schema_rows_are_complete():
    for r in orion.ops.schema():
        assert r["family"] and r["output"] and r["evidence"] and r["status"], r["name"]
        assert list(r["types"]) == [p.rstrip("?") for p in r["params"]], r["name"]
        assert all(c.startswith("C") and len(c) == 3 for c in r["constraints"]), r["name"]
        if r["evidence"] == "rejected":                    # the simulator rejects it with that ID, always
            assert r["constraints"] and r["lowering"] and r["status"] == f"rejected ({r['constraints'][0]})"


def _resolve(builder: str):
    if builder == "Graph.const":
        return Graph.const
    obj = ops
    for part in builder.split("."):
        obj = getattr(obj, part)
    return obj


def test_every_simulator_op_is_buildable():
    for r in orion.ops.schema():
        assert r["builder"], f"{r['name']}: no graph builder"
        assert callable(_resolve(r["builder"])), r["builder"]


def test_ir_ops_and_schema_agree_both_directions():
    schema = {r["name"]: r for r in orion.ops.schema()}
    assert set(OPS) - {"input"} == set(schema)
    for name, d in OPS.items():
        if name in ("input", "const"):
            continue
        row = schema[name]
        carried = set(schema[name]["ir_params"])
        required = {p for p in row["params"] if not p.endswith("?")}
        assert carried <= set(row["types"]), name                 # nothing the simulator does not know
        assert required <= carried, name                          # nothing the simulator requires is missing
        for a in d.attrs:                                         # attribute kinds follow the schema types
            assert row["types"][a.name].startswith("const"), (name, a.name)


def test_lowered_ops_are_exactly_the_decomposed_and_rejected_ones():
    lowered = {r["name"] for r in orion.ops.schema() if r["lowering"]}
    assert lowered == set(decompose.LOWERINGS)
    assert lowered == {n for n, d in OPS.items() if d.lowered_by == "decompose"}
    assert {"gelu", "rsqrt", "silu", "real_div", "reduce_mean", "scaled_dot_product_attention"} == lowered


@pytest.mark.parametrize("build,cid", [
    (lambda x: ops.silu(x), None),
    (lambda x: ops.real_div(x, 2.0), None),
    (lambda x: ops.gelu(x), "C10"),
    (lambda x: ops.rsqrt(x), "C20"),
])
def test_validate_rejects_what_the_schema_lowers(build, cid):
    """Without decompose, validate stops each lowered op, with the schema's first constraint ID."""
    g = Graph()
    x = g.input("x", (1, 64, 1, 96))
    g.output("y", build(x))
    with pytest.raises(CompileError) as e:
        lower(g, pipeline=[p for p in default_pipeline() if p != "decompose"])
    assert e.value.constraint == cid and "run decompose" in str(e.value)


def test_validate_limits_come_from_the_constraint_catalog():
    cat = {c["id"]: c["limits"] for c in orion.sim.constraints(orion.sim.Profile(chip="m1"))}
    lim = validate.limits("m1")
    assert lim["max_kernel_width"] == cat["C24"]["max_kernel_width"] == 13
    assert validate.limits(None)["max_kernel_width"] == 15
    assert lim["max_rank"] == 5 and lim["reject_input_channels"] == 32000


def test_io_legalize_lists_come_from_the_output_rules():
    rules = {r["name"]: r["output"] for r in orion.ops.schema()}
    assert io_legalize._BROADCASTING == {n for n, o in rules.items() if o.startswith("broadcast(")}
    assert {"add", "mul", "maximum", "select"} <= io_legalize._BROADCASTING
    assert {"exp", "silu", "cast", "identity"} <= io_legalize._PER_ELEMENT
    assert "softmax" not in io_legalize._PER_ELEMENT and "band_part" not in io_legalize._PER_ELEMENT


def test_operand_types_are_checked_from_the_schema():
    g = Graph()
    x = g.input("x", (1, 64, 1, 32))
    with pytest.raises(orion.GraphError, match="indices must be"):
        ops.make("gather", {"x": x, "indices": x}, {"axis": 1})
    with pytest.raises(orion.GraphError, match="cond must be bool"):
        ops.make("select", {"cond": x, "a": x, "b": x})
    with pytest.raises(orion.GraphError, match="scale must be a constant"):
        ops.make("dequantize", {"input": ops.quantize(x, 0.5), "scale": x}, {"axis": None})
    assert ops.gather(x, np.arange(4), axis=1).shape == (1, 4, 1, 32)


def test_composites_load_in_either_import_order():
    """The composites import the op families (not the ops package, which re-exports them: no import circle,
    tests/test_layers.py); ``ops.<composite>`` is the composite whichever of the two a program imports first."""
    import subprocess
    import sys

    code = ("import orion.ir.ops as o, orion.ir.composites as c; "
            "assert o.rms_norm is c.rms_norm and o.linear is c.linear")
    subprocess.run([sys.executable, "-c", code], check=True)
    code = "import orion.ir.composites as c, orion.ir.ops as o; assert o.rope is c.rope"
    subprocess.run([sys.executable, "-c", code], check=True)
