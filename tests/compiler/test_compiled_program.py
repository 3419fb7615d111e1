"""CompiledProgram: calling by graph names with user shapes, bad input, weights, save/load, repr."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from compiler_helpers import assert_fp16_close, sim_compile, rng  # noqa: F401 (fixture)
from orion.errors import InputError, ProgramStateError, WeightUpdateError
from orion.ir import Graph, evaluate, ops



def _graph(rng):
    g = Graph("prog")
    x = g.input("x", (1, 64, 1, 16))
    w = g.weight("w", rng.standard_normal((64, 64)) / 8, shape=(64, 64, 1, 1))
    d = g.weight("d", rng.standard_normal((32, 64)) / 8, shape=(32, 64, 1, 1), dynamic=True)
    h = ops.conv(x, w)
    g.output("h", h)
    g.output("both", ops.concat([ops.conv(h, d), x[:, :16]], axis=1), dtype="fp32")
    return g


def test_call_by_name_with_user_shapes(rng):
    g = _graph(rng)
    prog = sim_compile(g)
    assert [s.name for s in prog.inputs] == ["x"] and prog.dynamic_weights == ["d"]
    assert {s.name: s.shape for s in prog.outputs} == {"h": (1, 64, 1, 16), "both": (1, 48, 1, 16)}
    a = rng.standard_normal((1, 64, 1, 16)).astype(np.float32)
    out = prog(x=a)
    ref = evaluate(g, {"x": a.astype(np.float16)})
    assert out["both"].dtype == np.float32 and out["h"].dtype == np.float16
    for k in ref:
        assert_fp16_close(out[k], ref[k])
    r = repr(prog)
    assert "x: float16[1, 64, 1, 16]" in r and "dynamic_weights=[d]" in r
    assert "<table>" in prog._repr_html_()
    prog.release()
    with pytest.raises(ProgramStateError):
        prog(x=a)


def test_bad_input(rng):
    prog = sim_compile(_graph(rng))
    a = np.zeros((1, 64, 1, 16), np.float32)
    with pytest.raises(InputError, match="expected shape \\[1, 64, 1, 16\\], got \\[1, 64, 1, 8\\]"):
        prog(x=a[..., :8])
    with pytest.raises(InputError, match="floating-point"):
        prog(x=a.astype(np.int32))
    with pytest.raises(InputError, match="unknown input name.*'y'"):
        prog(x=a, y=a)
    with pytest.raises(InputError, match="dynamic weight"):
        prog(x=a, d=np.zeros((32, 64)))
    with pytest.raises(InputError, match="missing input"):
        prog()
    with pytest.raises(InputError, match="cannot convert|floating-point"):
        prog(x="not an array")


def test_baked_weight_update_recompiles(rng):
    import orion
    g = _graph(rng)
    prog = sim_compile(g)
    a = rng.standard_normal((1, 64, 1, 16)).astype(np.float16)
    before = orion.counters()["compiles"]
    w2 = rng.standard_normal((64, 64)) / 8
    prog.set_weights(w=w2)
    assert orion.counters()["compiles"] == before + 1            # charged against the budget (C05)
    g2 = g.clone()
    g2.weights["w"].node.attrs["value"] = w2.reshape(64, 64, 1, 1)
    assert_fp16_close(prog(x=a)["h"], evaluate(g2, {"x": a})["h"])
    before = orion.counters()["compiles"]
    prog.set_weights(d=np.zeros((32, 64)))
    assert orion.counters()["compiles"] == before                # dynamic: no compile
    prog.release()


def test_save_and_load(rng, tmp_path):
    from orion.compiler.program import load
    g = _graph(rng)
    prog = sim_compile(g)
    prog.set_weights(d=np.ones((32, 64)) / 64)
    a = rng.standard_normal((1, 64, 1, 16)).astype(np.float16)
    expected = prog(x=a)
    target = tmp_path / "saved"
    prog.save(target)
    prog.save(target)                                            # replacing an existing save is atomic too
    assert sorted(os.listdir(target)) == ["dynamic_weights.npz", "model.mil", "program.json", "weights"]
    assert not [p for p in os.listdir(tmp_path) if p != "saved"], "no temporary folders left behind"
    meta = json.loads((target / "program.json").read_text())
    assert meta["target"] == "ios18"
    loaded = load(target, device="sim")
    got = loaded(x=a)
    for k in expected:
        np.testing.assert_array_equal(got[k], expected[k])
    assert loaded.mil == prog.mil
    with pytest.raises(WeightUpdateError, match="no source graph"):
        loaded.set_weights(w=np.zeros((64, 64)))
    loaded.set_weights(d=np.zeros((32, 64)))
    with pytest.raises(InputError, match="not a saved orion program"):
        load(tmp_path / "nothing")
    prog.release()
    loaded.release()


def test_save_writes_files_without_runtime(rng, tmp_path):
    prog = sim_compile(_graph(rng))
    prog.save(tmp_path / "p")
    assert (tmp_path / "p" / "model.mil").read_text() == prog.mil
    assert (tmp_path / "p" / "weights" / "weight.bin").read_bytes() == prog.weights["@model_path/weights/weight.bin"]


def test_live_columns_on_widened_outputs(rng):
    """run(live_columns=n): the first n graph columns equal a full run bit for bit, the program's outputs
    being widened (column j at j*k of the surface) - the hint scales to the MIL outputs."""
    g = _graph(rng)
    prog = sim_compile(g)
    hint = prog.live_columns_hint(3)
    assert set(hint) == {p.mil_name for ob in prog.io_plan.outputs.values() for p in ob.parts}
    assert any(v > 3 for v in hint.values())            # some output is widened on the surface
    a, b = (rng.standard_normal((1, 64, 1, 16)).astype(np.float32) for _ in range(2))
    want = prog(x=a)
    prog(x=b)                                            # stale values in the program's memory
    got = prog.run({"x": a}, live_columns=3)
    for k in want:
        assert np.array_equal(got[k][..., :3], want[k][..., :3]), k
    assert "summary" in prog.program.live_notes(hint)[-1]


def test_dropped_weight_files_free_the_host_copy_and_say_so(rng, tmp_path):
    """The generation engine drops each program's host copy of its weight files (as large as the
    weights): evaluation, staging and recompiles go on; reading or saving the files is a clear error."""
    g = _graph(rng)
    prog = sim_compile(g)
    a = rng.standard_normal((1, 64, 1, 16)).astype(np.float32)
    before = prog(x=a)
    prog.drop_weight_files()
    for k, v in prog(x=a).items():
        np.testing.assert_array_equal(v, before[k])
    with pytest.raises(ProgramStateError, match="dropped"):
        prog.weights
    with pytest.raises(ProgramStateError, match="dropped"):
        prog.save(tmp_path / "p")
    assert not (tmp_path / "p").exists()
    prog.set_weights(w=np.zeros((64, 64), np.float32))       # a baked weight: recompiled from the graph
    assert not prog(x=a)["h"].any()
    with pytest.raises(ProgramStateError, match="dropped"):
        prog.weights
    assert "weight files dropped" in prog._repr_html_()


@pytest.mark.parametrize("bad", [np.nan, np.inf, 70000.0])
def test_a_dynamic_weight_update_with_a_non_finite_value_is_refused_in_fp16_and_fp32(rng, bad):
    """set_weights checks fp16 updates by their bits (finite_fp16) and fp32 ones by their fp16 rounding: NaN, inf
    and values beyond +-65504 raise InputError naming the weight (C37); +-65504 passes, and so does an fp32 value
    just below 65520 (beyond the two-reduction bound, but fp16 rounds it to 65504)."""
    prog = sim_compile(_graph(rng))
    for dtype in (np.float16, np.float32):
        d = np.zeros((32, 64), dtype)
        d[0, 0] = 65504
        if dtype == np.float32:
            d[0, 1] = np.float32(65520) - np.float32(2.0 ** -8)
        prog.set_weights(d=d)
        with np.errstate(over="ignore"):
            d[5, 7] = dtype(bad)
        if dtype == np.float16 or not np.isfinite(bad) or abs(bad) > 65519:
            with pytest.raises(InputError, match="'d'.*C37"):
                prog.set_weights(d=d)
    prog.release()
