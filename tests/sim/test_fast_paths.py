"""Executor fast paths must not change a single bit: convs with a constant weight (packed once at plan
build for the panel kernel), reshape/identity as views of their source, broadcast consts expanded at
build. Each is checked against the general path (the GEMM test hook, numpy's exact fp16 rounding)
under every ISA the machine has and 1 vs 2 threads.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import orion
from orion import _native
from kernel_helpers import each_isa_and_threads
from simutil import assert_fp16_close, blob_const, blob_file, const, f16, program, ref, run, stmt

rng = np.random.default_rng(99)


@pytest.fixture(autouse=True)
def _restore():
    yield
    _native.testing.force_isa("best")
    _native.set_num_threads(0)


def randn(*shape, scale=1.0):
    return f16(rng.standard_normal(shape) * scale)


def bits(a):
    u = np.asarray(a).view(np.uint16).copy()
    u[np.isnan(a)] = 0x7E00
    return u


def everywhere(fn):
    """fn() (an array or a dict of arrays) under every ISA and 1 / 2 threads; all results must be
    bit-identical; returns the first."""
    first = None
    for isa, n in each_isa_and_threads():
        got = fn()
        if first is None:
            first = got
        for k in (got if isinstance(got, dict) else [None]):
            g, f = (got[k], first[k]) if k is not None else (got, first)
            np.testing.assert_array_equal(bits(g), bits(f), err_msg=f"{k or ''} {isa}, {n} threads")
    return first


def linear_program(n, cin, cout, s):
    body = [
        const("pt", "valid", "string"), const("st", [1, 1], "int32", tensor=True),
        const("pd", [0, 0, 0, 0], "int32", tensor=True), const("dl", [1, 1], "int32", tensor=True),
        const("gr", 1, "int32"), blob_const("w", "fp16", [cout, cin, 1, 1], "@model_path/weights/w.bin"),
        stmt("y", "fp16", [n, cout, 1, s], "conv", dilations="dl", groups="gr", pad="pd", pad_type="pt",
             strides="st", weight="w", x="x"),
    ]
    return program({"x": ("fp16", [n, cin, 1, s])}, body, ["y"])


# (batch, in, out, columns): decode's 16 columns, widths around the 16-column kernel chunks and the
# 32-column routing bound, row counts that leave a partial 16-row panel, a long K (column blocks).
@pytest.mark.parametrize("n,cin,cout,s", [(1, 64, 48, 16), (1, 50, 33, 1), (1, 24, 16, 17), (2, 40, 70, 32),
                                          (1, 70, 100, 33), (1, 33, 20, 64), (3, 20, 18, 5), (1, 3072, 40, 48)])
def test_conv_constant_weight_is_the_gemm_bit_for_bit(n, cin, cout, s):
    w = randn(cout, cin, 1, 1, scale=1 / 8)
    x = randn(n, cin, 1, s)
    data, _ = blob_file(w)
    text = linear_program(n, cin, cout, s)
    y = everywhere(lambda: run(text, {"@model_path/weights/w.bin": data}, {"x": x})[0]["y"])
    # the GEMM hook packs nothing ahead: its panel route (S <= 32) or blocked route (S > 32) runs the same
    # fma chains, so the packed-at-build weights must give exactly its bits
    for b in range(n):
        np.testing.assert_array_equal(bits(y[b, :, 0, :]), bits(_native.gemm_f16(w[:, :, 0, 0], x[b, :, 0, :])))
    want = np.einsum("oc,ncs->nos", ref(w[:, :, 0, 0]), ref(x[:, :, 0, :]))[:, :, None, :]
    assert_fp16_close(y, want, rtol=2e-3, atol=1e-3)


def test_conv_constant_weight_specials():
    w = randn(20, 8, 1, 1)
    w[3, 2] = np.inf
    w[5, 0] = np.nan
    x = randn(1, 8, 1, 16)
    x[0, 4, 0, 7] = np.nan
    data, _ = blob_file(w)
    y = everywhere(lambda: run(linear_program(1, 8, 20, 16), {"@model_path/weights/w.bin": data}, {"x": x})[0]["y"])
    np.testing.assert_array_equal(bits(y[0, :, 0, :]), bits(_native.gemm_f16(w[:, :, 0, 0], x[0, :, 0, :])))
    assert np.isnan(y[0, 5]).all() and np.isnan(y[0, :, 0, 7]).all()


def test_reshape_and_identity_are_views_with_their_source_kept_alive():
    # r views a; later ops would reuse a's arena space if a's lifetime ended at its last direct use
    x = randn(1, 8, 1, 16)
    body = [
        const("one", 1.0, "fp16"), const("two", 2.0, "fp16"),
        const("s1", [1, 128], "int32", tensor=True), const("s2", [1, 8, 1, 16], "int32", tensor=True),
        stmt("a", "fp16", [1, 8, 1, 16], "add", x="x", y="one"),
        stmt("r", "fp16", [1, 128], "reshape", x="a", shape="s1"),
        stmt("b1", "fp16", [1, 8, 1, 16], "mul", x="x", y="two"),
        stmt("b2", "fp16", [1, 8, 1, 16], "mul", x="b1", y="two"),
        stmt("b3", "fp16", [1, 8, 1, 16], "add", x="b2", y="one"),
        stmt("r2", "fp16", [1, 8, 1, 16], "reshape", x="r", shape="s2"),
        stmt("r3", "fp16", [1, 8, 1, 16], "identity", x="r2"),
        stmt("y", "fp16", [1, 8, 1, 16], "add", x="r3", y="b3"),
        stmt("xi", "fp16", [1, 128], "reshape", x="x", shape="s1"),      # a view of a parameter, returned
    ]
    text = program({"x": ("fp16", [1, 8, 1, 16])}, body, ["y", "r", "xi"])
    o, _ = run(text, inputs={"x": x}, concurrent=4)
    a = (x.astype(np.float32) + 1).astype(np.float16)
    b3 = ((x.astype(np.float32) * 2).astype(np.float16).astype(np.float32) * 2 + 1).astype(np.float16)
    np.testing.assert_array_equal(o["y"], (a.astype(np.float32) + b3.astype(np.float32)).astype(np.float16))
    np.testing.assert_array_equal(o["r"], a.reshape(1, 128))
    np.testing.assert_array_equal(o["xi"], x.reshape(1, 128))


def _slices_program(x_shape, cuts):
    """y_i = slice_by_size(x, begin_i, size_i) + 0 for each cut (the add makes each a computed output),
    plus the raw slices returned: views of the input must read the right bytes either way."""
    body = [const("zero", 0.0, "fp16")]
    outs = []
    for i, (b, sz) in enumerate(cuts):
        body += [const(f"b{i}", b, "int32", tensor=True), const(f"s{i}", sz, "int32", tensor=True),
                 stmt(f"c{i}", "fp16", sz, "slice_by_size", x="x", begin=f"b{i}", size=f"s{i}"),
                 const(f"r{i}", [int(np.prod(sz))], "int32", tensor=True),
                 stmt(f"f{i}", "fp16", [int(np.prod(sz))], "reshape", x=f"c{i}", shape=f"r{i}"),
                 stmt(f"y{i}", "fp16", [int(np.prod(sz))], "add", x=f"f{i}", y="zero")]
        outs += [f"y{i}", f"c{i}"]
    return program({"x": ("fp16", x_shape)}, body, outs)


def test_contiguous_slices_of_an_input_are_views():
    """A slice of an input that is one run of its bytes (a weight cut out of a packed weight surface) is
    that run, not a copy: same values as numpy for cuts at offsets on the outer axes, strided cuts
    still copied; the plan moves fewer bytes with views than with copies."""
    x = randn(1, 6, 5, 8)
    cuts = [([0, 2, 0, 0], [1, 3, 5, 8]),      # panels 2..4: contiguous
            ([0, 4, 2, 0], [1, 1, 2, 8]),      # rows 2..3 of panel 4: contiguous
            ([0, 1, 3, 5], [1, 1, 1, 3]),      # inside one row: contiguous
            ([0, 0, 1, 0], [1, 6, 2, 8]),      # rows of every panel: strided (a copy)
            ([0, 0, 0, 2], [1, 6, 5, 4])]      # columns: strided (a copy)
    o, _ = run(_slices_program([1, 6, 5, 8], cuts), inputs={"x": x}, concurrent=3)
    for i, (b, sz) in enumerate(cuts):
        want = x[tuple(slice(bi, bi + si) for bi, si in zip(b, sz))]
        np.testing.assert_array_equal(o[f"c{i}"], want)
        np.testing.assert_array_equal(o[f"y{i}"], want.ravel())
    same_size = [([0, 2, 0, 0], [1, 2, 5, 8]), ([0, 0, 0, 0], [1, 5, 2, 8])]     # 80 values each
    view, copy = (_native.testing.sim_plan_info(_slices_program([1, 6, 5, 8], [c]), {}, "m4", "strict")
                  for c in same_size)
    assert view["activation_bytes"] < copy["activation_bytes"]


def test_width_slices_stay_copies_where_c35_clamps():
    """Pre-A16 chips saturate a width-axis slice with begin != 0 (C35): that slice is not a view there."""
    x = f16(np.full((1, 1, 1, 16), 5000.0))
    o, w = run(_slices_program([1, 1, 1, 16], [([0, 0, 0, 4], [1, 1, 1, 8])]), inputs={"x": x}, chip="m1",
                strictness="permissive")
    assert (o["c0"] == 4094).all() and any("C35" in m for m in w)


@pytest.mark.parametrize("op,np_op", [("add", np.add), ("mul", np.multiply), ("real_div", np.divide)])
def test_broadcast_consts_expanded_at_build(op, np_op):
    # bias [C,1] over [C,S] (x first and second), a [1,S] row, the ones that widen an output
    x = randn(1, 48, 1, 16)
    c_col, c_row = randn(1, 48, 1, 1), randn(1, 1, 1, 16)
    ones = np.ones((1, 1, 1, 1, 2), np.float16)
    body = [
        const("ccol", c_col, "fp16"), const("crow", c_row, "fp16"), const("ones", ones, "fp16"),
        const("s5", [1, 48, 1, 16, 1], "int32", tensor=True),
        stmt("y1", "fp16", [1, 48, 1, 16], op, x="x", y="ccol"),
        stmt("y2", "fp16", [1, 48, 1, 16], op, x="ccol", y="x"),
        stmt("y3", "fp16", [1, 48, 1, 16], op, x="x", y="crow"),
        stmt("x5", "fp16", [1, 48, 1, 16, 1], "reshape", x="x", shape="s5"),
        stmt("y4", "fp16", [1, 48, 1, 16, 2], op, x="x5", y="ones"),
    ]
    text = program({"x": ("fp16", [1, 48, 1, 16])}, body, ["y1", "y2", "y3", "y4"])
    o = everywhere(lambda: run(text, inputs={"x": x})[0])
    x32 = x.astype(np.float32)
    with np.errstate(all="ignore"):   # fp32 op, one rounding: what the general path computes
        want = {"y1": np_op(x32, c_col.astype(np.float32)), "y2": np_op(c_col.astype(np.float32), x32),
                "y3": np_op(x32, c_row.astype(np.float32)), "y4": np_op(x32[..., None], ones.astype(np.float32))}
    for k, v in want.items():
        np.testing.assert_array_equal(bits(o[k]), bits(v.astype(np.float16)), err_msg=k)


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmRSS from /proc")
@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="AddressSanitizer keeps freed memory in quarantine: the resident set says nothing here")
@pytest.mark.filterwarnings("ignore")
def test_a_packed_linear_weight_is_held_once():
    # the plan packs a linear's constant weight into panels while lowering; its dense snapshot, which no
    # step reads at run time, is dropped (it doubled every linear's memory). The Python program keeps its
    # own copy of the weight file (for reload): about 2x the weight in all, 3x when the snapshot stayed.
    import gc
    M = K = 4096
    w = np.random.default_rng(0).standard_normal((M, K), np.float32) * 0.02
    g = orion.Graph("big_linear")
    x = g.input("x", (1, K, 1, 16))
    g.output("y", orion.ops.linear(x, g.weight("w", w)))
    del w
    gc.collect()
    r0 = _rss_bytes()
    p = orion.compile(g, device="sim")
    del g
    gc.collect()
    y = p(x=np.ones((1, K, 1, 16), np.float32))["y"]
    grown = (_rss_bytes() - r0) / (M * K * 2)
    assert np.isfinite(y).all()
    assert grown < 2.5, f"the program holds {grown:.2f}x the fp16 weight"
