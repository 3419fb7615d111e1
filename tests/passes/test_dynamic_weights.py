"""dynamic_weights: weights become program inputs; 1x1 convs lower to the
matmul idiom of passes/dynamic_weights.py; optional packing; set_weights updates them without a compile."""

from __future__ import annotations

import numpy as np
import pytest

from compiler_helpers import (apply_passes, assert_fp16_close, ops_of, reference_program, rng,  # noqa: F401
                              run_sim, sim_compile)
from orion.compiler import lower
from orion.errors import InputError
from orion.ir import Graph, evaluate, ops


def _ffn(rng, d=64, h=96, s=64):
    g = Graph("ffn")
    x = g.input("x", (1, d, 1, s))
    w1 = g.weight("w1", rng.standard_normal((h, d)) / 8, shape=(h, d, 1, 1))
    w3 = g.weight("w3", rng.standard_normal((h, d)) / 8, shape=(h, d, 1, 1))
    w2 = g.weight("w2", rng.standard_normal((d, h)) / 10, shape=(d, h, 1, 1))
    norm = g.weight("norm", rng.uniform(0.5, 1.5, d), shape=(1, d, 1, 1))
    xn = ops.rms_norm(x, norm)
    g.output("y", ops.swiglu_ffn(xn, w1, w2, w3))
    return g


def test_conv_weights_become_matmul_idiom(rng):
    g = _ffn(rng)
    after, ctx = apply_passes(g, "decompose", "dynamic_weights", "dce", dynamic_weights=["w1"])
    assert set(after.inputs) == {"x", "w1"}
    assert after.inputs["w1"].shape == (1, 64, 1, 96)              # [1, IC, 1, OC]
    assert ops_of(after).count("conv") == 2 and ops_of(after).count("matmul") == 1
    dw = ctx.io.dynamic["w1"]
    assert dw.layout == "conv_t" and dw.user_shape == (96, 64)
    # the idiom: reshape, transpose, reshape(W), matmul, transpose, reshape
    mm = next(n for n in after.nodes if n.op == "matmul")
    assert mm.inputs["x"].op == "transpose" and mm.inputs["y"].op == "reshape"


def test_whole_graph_dynamic_matches_reference(rng):
    g = _ffn(rng)
    low = lower(g, dynamic_weights=True)
    assert not any(n.op == "conv" for n in low.graph.nodes)
    assert set(low.io.dynamic) == {"w1", "w2", "w3", "norm"}
    assert low.weights == {} or all(len(b) < 1000 for b in low.weights.values())
    a = rng.standard_normal((1, 64, 1, 64))
    np.testing.assert_allclose(reference_program(low, {"x": a})["y"], evaluate(g, {"x": a})["y"], rtol=1e-9)


def test_packing_shares_one_surface(rng):
    g = _ffn(rng)
    low = lower(g, dynamic_weights=["w1", "w3", "w2"], pack_dynamic_weights=True)
    packed = [b for b in low.io.inputs.values() if b.kind == "weight"]
    assert [b.name for b in packed] == ["packed_w64", "w2"]          # w1, w3 share IC = 64
    assert packed[0].shape == (1, 64, 1, 192)
    assert low.io.dynamic["w3"].offset == 96
    assert "slice_by_size" in low.mil
    a = rng.standard_normal((1, 64, 1, 64))
    np.testing.assert_allclose(reference_program(low, {"x": a})["y"], evaluate(g, {"x": a})["y"], rtol=1e-9)


def test_packing_disabled_on_m1_m2(rng):
    g = _ffn(rng)
    with pytest.warns(UserWarning, match="C35"):
        low = lower(g, target="ios16", dynamic_weights=["w1", "w3"], pack_dynamic_weights=True)
    assert "packed_w64" not in low.io.inputs


def test_unknown_dynamic_weight_name(rng):
    with pytest.raises(InputError, match="unknown weight"):
        lower(_ffn(rng), dynamic_weights=["nope"])


def test_weight_flag_on_the_graph(rng):
    g = Graph()
    x = g.input("x", (1, 32, 1, 32))
    w = g.weight("w", rng.standard_normal((48, 32)), dynamic=True)
    g.output("y", ops.linear(x, w))                                  # rank-2 weight: reshape then conv
    low = lower(g)
    assert set(low.io.dynamic) == {"w"} and low.io.dynamic["w"].layout == "conv_t"
    a = rng.standard_normal((1, 32, 1, 32))
    np.testing.assert_allclose(reference_program(low, {"x": a})["y"], evaluate(g, {"x": a})["y"], rtol=1e-9)


def test_mixed_use_weight_stays_as_is(rng):
    """A weight used by a conv and elsewhere: one input in its own layout, the conv becomes W·X."""
    g = Graph()
    x = g.input("x", (1, 16, 1, 32))
    w = g.weight("w", rng.standard_normal((16, 16, 1, 1)) / 4)
    g.output("y", ops.add(ops.conv(x, w), ops.reduce_sum(w, [0, 1])))
    low = lower(g, dynamic_weights=True)
    assert low.io.dynamic["w"].layout == "as_is"
    a = rng.standard_normal((1, 16, 1, 32))
    np.testing.assert_allclose(reference_program(low, {"x": a})["y"], evaluate(g, {"x": a})["y"], rtol=1e-9)


@pytest.mark.parametrize("pack", [False, True])
def test_set_weights_through_the_simulator(rng, pack):
    g = _ffn(rng)
    prog = sim_compile(g, dynamic_weights=True, pack_dynamic_weights=pack)
    a = rng.standard_normal((1, 64, 1, 64)).astype(np.float16)
    assert_fp16_close(prog(x=a)["y"], evaluate(g, {"x": a})["y"], rtol=8 * 2 ** -10)
    new = {"w1": rng.standard_normal((96, 64)) / 8, "w3": rng.standard_normal((96, 64)) / 8,
           "norm": rng.uniform(0.5, 1.5, 64)}
    before = _counters()
    prog.set_weights(**new)
    after = _counters()
    if before is not None:
        assert after["compiles"] == before["compiles"], "dynamic weight update must not compile"
    g2 = g.clone()
    for k, v in new.items():
        g2.weights[k].node.attrs["value"] = np.asarray(v).reshape(g2.weights[k].shape)
    assert_fp16_close(prog(x=a)["y"], evaluate(g2, {"x": a})["y"], rtol=8 * 2 ** -10)
    np.testing.assert_array_equal(prog.get_weight("w1"), new["w1"])
    with pytest.raises(InputError, match="expected shape"):
        prog.set_weights(w1=np.zeros((64, 96)))
    with pytest.raises(InputError, match="unknown weight"):
        prog.set_weights(w9=np.zeros((64, 96)))
    with pytest.raises(InputError, match="fp16 range"):
        prog.set_weights(w2=np.full((64, 96), np.nan))
    prog.release()


def _counters():
    try:
        from orion.native.runtime import counters
        return counters()
    except Exception:  # noqa: BLE001 - runtime not built yet
        return None


def test_baked_linear_stays_a_conv(rng):
    """A rank-2 baked weight goes through reshape + constant folding: still a 1x1 conv, not a matmul (C46)."""
    g = Graph()
    x = g.input("x", (1, 32, 1, 32))
    g.output("y", ops.linear(x, g.weight("w", rng.standard_normal((48, 32)))))
    low = lower(g)
    assert "= conv(" in low.mil and "matmul" not in low.mil
    a = rng.standard_normal((1, 32, 1, 32)).astype(np.float16)
    assert_fp16_close(run_sim(g, {"x": a})["y"], evaluate(g, {"x": a})["y"])   # and computes x W^T


def _attn_ffn(rng, d=128, kv=64, h=192, s=16):
    """Weights of a decoder layer's shapes (q/o d x d, k/v kv x d, w1/w3 h x d, w2 d x h), every OC a
    multiple of 64: the panel layout's inputs."""
    g = Graph("layer")
    x = g.input("x", (1, d, 1, s))
    shapes = {"wq": (d, d), "wk": (kv, d), "wv": (kv, d), "wo": (d, d), "w1": (h, d), "w3": (h, d), "w2": (d, h)}
    w = {n: g.weight(n, rng.standard_normal(sh) / np.sqrt(sh[1]), shape=sh + (1, 1)) for n, sh in shapes.items()}
    q, k, v = (ops.conv(x, w[n]) for n in ("wq", "wk", "wv"))
    y = ops.add(ops.conv(ops.mul(q, ops.reduce_sum(ops.mul(k, v), [1], keep_dims=True)), w["wo"]), x)
    g.output("y", ops.add(y, ops.swiglu_ffn(y, w["w1"], w["w2"], w["w3"])))
    return g


def test_panels_lay_weights_out_as_column_panels(rng):
    g = _attn_ffn(rng)
    low = lower(g, dynamic_weights=True, panel_dynamic_weights=True)
    dw = low.io.dynamic["w1"]
    assert dw.layout == "conv_p" and low.io.inputs["w1"].shape == (1, 3, 128, 64)   # [1, OC/64, IC, 64]
    W = rng.standard_normal((192, 128))
    surf = dw.to_surface(W)
    np.testing.assert_array_equal(surf[0, 1, :, 5], W[64 + 5])       # panel 1, column 5 = output channel 69
    assert low.graph.nodes and sum(n.op == "matmul" for n in low.graph.nodes) == 7


def test_panels_give_the_same_bits_as_the_row_layout(rng):
    """Each output is the same fma chain whatever the layout: panels change no bit (simulator)."""
    g = _attn_ffn(rng)
    a = rng.standard_normal((1, 128, 1, 16)).astype(np.float16)
    rows = sim_compile(g, dynamic_weights=True)
    want = rows(x=a)["y"]
    rows.release()
    for pack in (False, True):
        prog = sim_compile(g, dynamic_weights=True, panel_dynamic_weights=True, pack_dynamic_weights=pack)
        np.testing.assert_array_equal(prog(x=a)["y"], want)
        prog.release()


def test_panel_packing_fills_inputs_up_to_the_largest_weight(rng):
    """C12 pads every input to the largest: same-IC panel weights share inputs no larger than the largest
    weight (first fit, decreasing); slices on the panel axis."""
    g = _attn_ffn(rng)
    low = lower(g, dynamic_weights=True, panel_dynamic_weights=True, pack_dynamic_weights=True)
    weights = {b.name: b.shape for b in low.io.inputs.values() if b.kind == "weight"}
    # IC 128: w1 (3 panels) and w3 (3) fill inputs of their own; wq 2 + wo 2... cap 3 panels: [wq, wk], [wo, wv]
    assert weights["w1"] == weights["w3"] == (1, 3, 128, 64) and weights["w2"] == (1, 2, 192, 64)
    packed = {n: s for n, s in weights.items() if n.startswith("panels_w")}
    assert sorted(packed.values()) == [(1, 3, 128, 64), (1, 3, 128, 64)]
    members = {dw.input_key: [] for dw in low.io.dynamic.values()}
    for n, dw in low.io.dynamic.items():
        members[dw.input_key].append((dw.offset, n))
    assert sorted(sorted(m) for k, m in members.items() if k in packed) == [[(0, "wo"), (2, "wk")],
                                                                           [(0, "wq"), (2, "wv")]]


def test_panel_weights_update_through_the_simulator(rng):
    g = _attn_ffn(rng)
    prog = sim_compile(g, dynamic_weights=True, panel_dynamic_weights=True, pack_dynamic_weights=True)
    ref = sim_compile(g, dynamic_weights=True)
    a = rng.standard_normal((1, 128, 1, 16)).astype(np.float16)
    new = {"wk": rng.standard_normal((64, 128)) / 11, "w2": rng.standard_normal((128, 192)) / 14}
    prog.set_weights(**new)
    ref.set_weights(**new)
    np.testing.assert_array_equal(prog(x=a)["y"], ref(x=a)["y"])
    np.testing.assert_array_equal(prog.get_weight("wk"), new["wk"])
    prog.release()
    ref.release()


def test_panel_width_is_the_widest_dividing_every_oc(rng):
    """64 where every OC allows it, else 32 or 16 (tiny models); an OC no width divides keeps rows."""
    g = _ffn(rng)                                                     # OC 96 (w1, w3) and 64 (w2): 32
    low = lower(g, dynamic_weights=True, panel_dynamic_weights=True)
    assert {n: low.io.dynamic[n].surface_shape for n in ("w1", "w2")} == {"w1": (1, 3, 64, 32),
                                                                        "w2": (1, 2, 96, 32)}
    g = _ffn(rng, h=40)                                               # OC 40 and 64: 64 for w2 only
    low = lower(g, dynamic_weights=True, panel_dynamic_weights=True)
    assert low.io.dynamic["w1"].layout == "conv_t" and low.io.dynamic["w2"].surface_shape == (1, 1, 40, 64)
    a = rng.standard_normal((1, 64, 1, 64))
    np.testing.assert_allclose(reference_program(low, {"x": a})["y"], evaluate(g, {"x": a})["y"], rtol=1e-9)


def test_packing_stacks_per_channel_vectors_in_one_input(rng):
    """Norm weights and biases ([1, C, 1, 1]) share one input on the channel axis (each a contiguous
    slice) instead of one C12-sized surface each; the result does not change by a bit."""
    g = Graph("vectors")
    x = g.input("x", (1, 64, 1, 64))
    w1 = g.weight("w1", rng.standard_normal((96, 64)) / 8, shape=(96, 64, 1, 1))
    norm = g.weight("norm", rng.uniform(0.5, 1.5, 64), shape=(1, 64, 1, 1))
    n2 = g.weight("n2", rng.uniform(0.5, 1.5, 64), shape=(1, 64, 1, 1))
    g.output("y", ops.mul(ops.rms_norm(ops.add(x, ops.reduce_sum(ops.conv(x, w1), [1], keep_dims=True)), norm), n2))
    low = lower(g, dynamic_weights=True, pack_dynamic_weights=True)
    assert low.io.inputs["packed_vectors"].shape == (1, 128, 1, 1)
    assert {n: (low.io.dynamic[n].input_key, low.io.dynamic[n].offset) for n in ("norm", "n2")} == \
        {"norm": ("packed_vectors", 0), "n2": ("packed_vectors", 64)}
    a = rng.standard_normal((1, 64, 1, 64)).astype(np.float16)
    outs = []
    for pack in (False, True):
        prog = sim_compile(g, dynamic_weights=True, pack_dynamic_weights=pack)
        outs.append(prog(x=a)["y"])
        prog.set_weights(n2=np.full(64, 2.0))
        outs.append(prog(x=a)["y"])
        prog.release()
    np.testing.assert_array_equal(outs[0], outs[2])
    np.testing.assert_array_equal(outs[1], outs[3])


def test_a_saved_panel_program_loads_with_its_layout(rng, tmp_path):
    from orion.compiler.program import load
    g = _attn_ffn(rng)
    prog = sim_compile(g, dynamic_weights=True, panel_dynamic_weights=True, pack_dynamic_weights=True)
    prog.set_weights(wk=rng.standard_normal((64, 128)) / 11)
    a = rng.standard_normal((1, 128, 1, 16)).astype(np.float16)
    want = prog(x=a)["y"]
    prog.save(tmp_path / "p")
    prog.release()
    back = load(tmp_path / "p", device="sim")
    assert back._io.dynamic["wk"].layout == "conv_p" and back._io.dynamic["wk"].pack_axis == 1
    np.testing.assert_array_equal(back(x=a)["y"], want)
    new = rng.standard_normal((128, 192)) / 14
    back.set_weights(w2=new)
    back.release()


def test_dropping_the_host_copies_keeps_updates_working(rng, tmp_path):
    """drop_host_weights frees the compile-time values, the staged copies and the source graph: set_weights
    of dynamic weights still changes the result exactly as before; get_weight and save refuse, naming why."""
    from orion.errors import ProgramStateError
    g = _attn_ffn(rng)
    a = rng.standard_normal((1, 128, 1, 16)).astype(np.float16)
    new = {"wk": rng.standard_normal((64, 128)) / 11}
    kept, dropped = (sim_compile(g, dynamic_weights=True, panel_dynamic_weights=True, pack_dynamic_weights=True)
                     for _ in range(2))
    dropped.drop_host_weights()
    assert kept._packed and not dropped._packed            # no fp16 host copy of a packed input either
    np.testing.assert_array_equal(dropped(x=a)["y"], kept(x=a)["y"])
    for p in (kept, dropped):
        p.set_weights(**new)                               # one member of a packed input: the others stay
    np.testing.assert_array_equal(dropped(x=a)["y"], kept(x=a)["y"])
    assert not dropped._packed
    with pytest.raises(ProgramStateError, match="drop_host_weights"):
        dropped.get_weight("wk")
    with pytest.raises(ProgramStateError, match="drop_host_weights"):
        dropped.save(tmp_path / "p")
    assert not (tmp_path / "p").exists()
    kept.release()
    dropped.release()


@pytest.mark.parametrize("option", ["panel_dynamic_weights", "pack_dynamic_weights", "allow_concat"])
def test_a_switch_option_that_is_not_a_bool_is_refused(rng, option):
    from orion.errors import CompileError
    with pytest.raises(CompileError, match=f"compile option {option} must be True or False, got 'yes'"):
        lower(_ffn(rng), dynamic_weights=True, **{option: "yes"})
