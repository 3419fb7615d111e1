"""orion.sim.timing(): every step of every simulated eval inside the block, by op and step name, with the
cost model's flops and bytes; nothing recorded outside the block."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from compiler_helpers import sim_compile
from orion.ir import Graph, ops


def _program():
    g = Graph("timed")
    x = g.input("x", (1, 64, 1, 32))
    w = g.weight("w", np.random.default_rng(0).standard_normal((96, 64)) / 8)
    g.output("y", ops.relu(ops.linear(x, w)))
    return sim_compile(g)


def test_timing_counts_each_step_of_each_eval():
    prog = _program()
    a = np.ones((1, 64, 1, 32), np.float16)
    prog(x=a)                                                   # outside: not recorded
    with orion.sim.timing() as t:
        for _ in range(3):
            prog(x=a)
    prog(x=a)
    prog.release()
    by_op = {r["op"]: r for r in t.by_op()}
    assert by_op["conv"]["calls"] == 3 and by_op["conv"]["flops"] == 3 * 2 * 96 * 64 * 32
    assert all(r["calls"] % 3 == 0 and r["seconds"] > 0 for r in t.rows)
    assert t.seconds == pytest.approx(sum(r["seconds"] for r in t.by_op()), rel=1e-12)   # summed in another order
    assert "conv" in t.table() and t.table().splitlines()[0].split()[:3] == ["op", "calls", "ms"]


def test_a_second_block_starts_empty():
    prog = _program()
    a = np.ones((1, 64, 1, 32), np.float16)
    with orion.sim.timing():
        prog(x=a)
    with orion.sim.timing() as t:
        pass
    prog.release()
    assert t.rows == [] and t.seconds == 0 and t.by_op() == []
