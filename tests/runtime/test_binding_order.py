"""Inputs and outputs bind in alphabetical order of MIL names (C13, C03): by name it is always right;
the raw slot API reproduces what the hardware does with a declaration-ordered request."""

import numpy as np

import orion
from runtime_programs import rand, sub_program, three_outputs


def test_inputs_by_name_whatever_the_declaration_order():
    prog = orion.compile_mil(sub_program())
    assert [s.name for s in prog.inputs] == ["lora_a", "lora_b", "x"]  # slot order
    x, a, b = rand((1, 64, 1, 256), 1), rand((1, 64, 1, 256), 2), rand((1, 64, 1, 256), 3)
    y = prog(x=x, lora_a=a, lora_b=b)["y"]
    ref = (x.astype(np.float64) - (a.astype(np.float64) * b).astype(np.float16)).astype(np.float16)
    np.testing.assert_array_equal(y, ref)


def test_raw_request_in_declaration_order_gives_the_hardwares_wrong_answer():
    """An upstream runtime's bug: binding surfaces in text order. Slot 0 is lora_a, not x (C13)."""
    prog = orion.compile_mil(sub_program())
    x, a, b = rand((1, 64, 1, 256), 1), rand((1, 64, 1, 256), 2), rand((1, 64, 1, 256), 3)
    surf = {n: orion._native.Surface(prog.input_surface(n).alloc_size) for n in ("x", "lora_a", "lora_b")}
    for n, v in (("x", x), ("lora_a", a), ("lora_b", b)):
        surf[n].view("fp16", list(v.shape))[...] = v
    out = orion._native.Surface(prog.output_surface("y").alloc_size)
    prog.eval_slots([surf["x"], surf["lora_a"], surf["lora_b"]], [out])  # declaration order
    got = out.view("fp16", [1, 64, 1, 256])
    # Hardware semantics: slot0 -> lora_a := x, slot1 -> lora_b := a, slot2 -> x := b.
    wrong = (b.astype(np.float64) - (x.astype(np.float64) * a).astype(np.float16)).astype(np.float16)
    np.testing.assert_array_equal(got, wrong)


def test_outputs_by_name_whatever_the_return_order():
    prog = orion.compile_mil(three_outputs())
    assert [s.name for s in prog.outputs] == ["k", "q", "v"]
    x = rand((1, 64, 1, 256), 7)
    out = prog(x=x)
    xd = x.astype(np.float64)
    np.testing.assert_array_equal(out["q"], (xd + 1).astype(np.float16))
    np.testing.assert_array_equal(out["k"], (xd * 2).astype(np.float16))
    np.testing.assert_array_equal(out["v"], (xd - 3).astype(np.float16))
    # Raw output slot 0 holds k (alphabetical), not q (the first returned name).
    np.testing.assert_array_equal(prog.output_surface("k").view("fp16", [1, 64, 1, 256]), out["k"])
