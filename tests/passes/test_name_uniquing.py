"""names: unique SSA names (C40) and I/O names whose alphabetical order is collation-independent (C03/C13)."""

from __future__ import annotations

import re

import numpy as np

from orion.compiler import lower
from orion.ir import Graph, ops
from orion.compiler.passes.names import collation_consistent


def _io(names_in, names_out):
    g = Graph()
    xs = [g.input(n, (1, 768, 1, 32)) for n in names_in]
    for i, n in enumerate(names_out):
        g.output(n, ops.exp(ops.mul(xs[0], float(i + 1))))
    return lower(g)


def test_plain_names_are_kept():
    low = _io(["x", "mask"], ["logits", "hidden"])
    assert [b.mil_name for b in low.io.inputs.values()] == ["x", "mask"]
    assert [p.mil_name for b in low.io.outputs.values() for p in b.parts] == ["logits", "hidden"]


def test_case_and_underscore_conflicts_get_index_prefixes():
    low = _io(["B", "a"], ["k_cache", "kv"])
    ins = [b.mil_name for b in low.io.inputs.values()]
    outs = [p.mil_name for b in low.io.outputs.values() for p in b.parts]
    assert collation_consistent(ins) and collation_consistent(outs)
    assert outs == ["o00_k_cache", "o01_kv"]
    assert ins == ["a", "b"] or collation_consistent(ins)


def test_collation_check():
    assert collation_consistent(["a", "b2", "b10"])
    assert not collation_consistent(["k_cache", "kv"])      # '_' sorts between 'V' and 'v'
    assert not collation_consistent(["B", "a"])


def test_ssa_names_unique_even_when_user_names_collide_with_helpers():
    g = Graph()
    x = g.input("x", (1, 768, 1, 32))
    y = ops.conv(x, np.zeros((768, 768, 1, 1)), name="conv_pad")      # a user name equal to a helper scheme
    y = ops.add(y, 1.0, name="conv")
    g.output("out", ops.exp(y, name="out"))
    low = lower(g)
    defined = re.findall(r"^\s+\S+(?: \S+)* (\w+) = ", low.mil, flags=re.M)
    names = re.findall(r"> (\w+) = |^\s+(?:fp16|int32|bool|string) (\w+) = ", low.mil, flags=re.M)
    flat = [a or b for a, b in names]
    assert len(flat) == len(set(flat)), flat
    assert defined


def test_user_names_sanitised():
    g = Graph()
    x = g.input("Tokens", (1, 768, 1, 32))
    g.output("Out2", ops.exp(x))
    low = lower(g)
    assert low.io.inputs["Tokens"].mil_name == "tokens" and low.io.outputs["Out2"].parts[0].mil_name == "out2"
