"""Program lifecycle and calls by name (compile_mil, identifier, load/unload/release)."""

import re

import numpy as np
import pytest

import orion
from conftest import fp16_close
from runtime_programs import add_program, linear_program, rand, weight_blob


def test_add_by_name_matches_fp16_rounding_of_float64_sum():
    prog = orion.compile_mil(add_program())
    a, b = rand((1, 256, 1, 128), 1), rand((1, 256, 1, 128), 2)
    z = prog(a=a, b=b)["z"]
    assert z.dtype == np.float16 and z.shape == (1, 256, 1, 128)
    # One rounding of the exact sum: bit-identical to numpy's fp16 add (which rounds once too).
    np.testing.assert_array_equal(z, (a.astype(np.float64) + b).astype(np.float16))


def test_fp32_io_with_casts_inside_program():
    w = rand((128, 64, 1, 1), 3, 0.1)
    prog = orion.compile_mil(linear_program(fp32_io=True), {"@model_path/weights/w.bin": weight_blob(w)})
    x = np.random.default_rng(4).standard_normal((1, 64, 1, 256)).astype(np.float32)
    y = prog(x=x)["y"]
    assert y.dtype == np.float32
    ref = np.einsum("oi,is->os", w[:, :, 0, 0].astype(np.float64), x.astype(np.float16)[0, :, 0, :].astype(np.float64))
    fp16_close(y[0, :, 0, :], ref, scale=np.abs(ref).max() * 0.05)


def test_identifier_is_three_sha256_parts_and_tracks_weights():
    w1, w2 = rand((128, 64, 1, 1), 5), rand((128, 64, 1, 1), 6)
    p1 = orion.compile_mil(linear_program(), {"@model_path/weights/w.bin": weight_blob(w1)})
    p2 = orion.compile_mil(linear_program(), {"@model_path/weights/w.bin": weight_blob(w1)})
    p3 = orion.compile_mil(linear_program(), {"@model_path/weights/w.bin": weight_blob(w2)})
    assert re.fullmatch(r"[0-9A-F]{64}_[0-9A-F]{64}_[0-9A-F]{64}", p1.identifier)
    assert p1.identifier == p2.identifier
    mil1, wts1, opt1 = p1.identifier.split("_")
    mil3, wts3, opt3 = p3.identifier.split("_")
    assert mil1 == mil3 and opt1 == opt3 and wts1 != wts3


def test_lifecycle_states_and_context_manager():
    with orion.compile_mil(add_program()) as prog:
        assert prog.state == "loaded"
        prog.unload()
        assert prog.state == "unloaded"
        with pytest.raises(orion.ProgramStateError, match="load"):
            prog(a=rand((1, 256, 1, 128)), b=rand((1, 256, 1, 128)))
        prog.load()
        prog(a=rand((1, 256, 1, 128)), b=rand((1, 256, 1, 128)))
    assert prog.state == "released"
    with pytest.raises(orion.ProgramStateError, match="released"):
        prog(a=rand((1, 256, 1, 128)), b=rand((1, 256, 1, 128)))
    with pytest.raises(orion.ProgramStateError):
        prog.load()
    prog.release()  # idempotent


def test_repr_names_io():
    prog = orion.compile_mil(add_program())
    r = repr(prog)
    assert "a: float16[1, 256, 1, 128]" in r and "z: float16" in r and "sim" in r


def test_counters_count_compiles_loads_evals():
    before = orion.counters()
    prog = orion.compile_mil(add_program(shape=(1, 128, 1, 256)))
    x = rand((1, 128, 1, 256))
    prog(a=x, b=x)
    prog(a=x, b=x)
    after = orion.counters()
    assert after["compiles"] - before["compiles"] == 1
    assert after["loads"] - before["loads"] == 1
    assert after["evals"] - before["evals"] == 2


def test_syntax_error_is_typed_with_position():
    with pytest.raises(orion.MILSyntaxError) as e:
        orion.compile_mil("program(1.3)\n{ nonsense")
    assert e.value.line >= 1 and e.value.column >= 1


def test_unknown_device_and_missing_ane_are_clear():
    with pytest.raises(orion.OrionError, match="unknown device"):
        orion.compile_mil(add_program(), device="gpu")
    with pytest.raises(orion.OrionError, match="ANE"):
        orion.compile_mil(add_program(), device="ane")
