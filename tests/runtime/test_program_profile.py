"""Program.profile() / CompiledProgram.profile(): the cost model per op (the closest thing to a kernel
timeline off the device) and the notebook reprs of both program classes (I/O with ANE slot order,
identifier, device, counters; user strings escaped)."""

import math

import numpy as np
import pytest

import orion
from orion.native.cost_table import CostTable

from runtime_programs import sub_program


def _two_linears(name="two"):
    """The same [32 x 64] contraction twice: baked (a conv) and as a program input (a matmul)."""
    g = orion.Graph(name)
    x = g.input("x", (1, 64, 1, 16))
    wb = g.weight("w_baked", np.full((32, 64), 0.01, np.float32))
    wd = g.weight("w_dyn", np.full((32, 64), 0.01, np.float32), dynamic=True)
    g.output("y", orion.ops.linear(x, wb) + orion.ops.linear(x, wd))
    return g


@pytest.fixture
def compiled():
    p = orion.compile(_two_linears(), device="sim")
    yield p
    p.release()


def test_rows_sum_to_the_programs_estimate(compiled):
    table = compiled.profile()
    cost = compiled.program.cost
    assert isinstance(table, CostTable) and isinstance(table[0], dict)
    assert math.isclose(sum(r["est_ms"] for r in table), cost["est_ms"], rel_tol=1e-12)
    assert math.isclose(table.total_flops, cost["flops"], rel_tol=1e-12)
    assert table[-1]["unit"] == "dispatch" and table[-1]["est_ms"] == pytest.approx(0.095)
    assert {r["unit"] for r in table[:-1]} <= {"conv", "matmul", "other"}
    assert all(r["bytes"] > 0 for r in table[:-1])


def test_rows_follow_the_mil_and_charge_matmul_three_times_a_conv(compiled):
    table = compiled.profile()
    mil = compiled.mil
    names = [r["name"] for r in table[:-1]]
    assert all(f" {n} = " in mil for n in names)                  # MIL result names, program order
    assert [mil.index(f" {n} = ") for n in names] == sorted(mil.index(f" {n} = ") for n in names)
    conv = [r for r in table if r["unit"] == "conv"]
    mm = [r for r in table if r["unit"] == "matmul"]
    assert len(conv) == 1 and len(mm) == 1 and conv[0]["flops"] == mm[0]["flops"] == 2 * 32 * 64 * 16
    assert mm[0]["est_ms"] == pytest.approx(3 * conv[0]["est_ms"], rel=1e-12)     # C46


def test_table_renders_as_text_and_html(compiled):
    table = compiled.profile()
    text = str(table)
    assert "conv" in text and "matmul" in text and f"total {table.total_ms:.4f} ms" in text
    h = table._repr_html_()
    assert "CompiledProgram.profile()" in h and "(dispatch)" in h
    assert [r["unit"] for r in table.top(1)] == [max(table, key=lambda r: r["est_ms"])["unit"]]


def test_compiled_program_html_shows_io_slots_identifier_and_counters(compiled):
    h = compiled._repr_html_()
    assert "orion.CompiledProgram" in h and compiled.program.identifier in h
    assert "fp16" in h and "[1, 64, 1, 16]" in h and "w_dyn" in h
    assert "(slot 0)" in h and "compiles" in h and "sim" in h


def test_runtime_program_html_lists_slots_in_alphabetical_order():
    with orion.compile_mil(sub_program(), {}, device="sim") as p:
        h = p._repr_html_()
        assert p.identifier in h and "process counters" in h
        order = [h.index(f"<code>{n}</code>") for n in ("lora_a", "lora_b", "x")]
        assert order == sorted(order)                                   # slot order, not declaration order
        assert math.isclose(p.profile().total_ms, p.cost["est_ms"], rel_tol=1e-12)
    with pytest.raises(orion.errors.ProgramStateError, match="released"):
        p.profile()


def test_html_escapes_user_names_and_survives_release():
    p = orion.compile(_two_linears("a<b>&c"), device="sim")
    assert "a&lt;b&gt;&amp;c" in p._repr_html_() and "a<b>" not in p._repr_html_()
    p.release()
    assert "released" in p._repr_html_()
