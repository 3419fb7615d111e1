"""Compact live columns (``src/orion_native/sim/compact.h``): under a live-columns hint the element-wise steps,
the projections and the unpadding slices before them compute on dense copies of their few live columns
instead of strided ones, and scatter a result into its full layout only where something reads it there.

Pinned here: the live columns are bit-identical to a full evaluation and to the same live run with the
compact path switched off, for chains, a value read both compact and in full (a reduction), a value two
outputs read at different widths, operands broadcast along outer or inner axes (a per-column vector, an
output widened by a ones constant), projections and slices feeding the chain; every case checks the path
ran (``sim_compact_steps``), so a path silently switched off fails. At model level: a shared-layer Llama
decodes, batch-generates and speculates with the same logits and tokens either way.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np
import orion
import pytest
from orion import _native
from orion.models import load
from simutil import const, program, stmt

C, W = 24, 16
PROFILE = orion.sim.Profile(strictness="permissive", min_surface_bytes=2)
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16 if a.dtype == np.float16 else np.uint32)


@contextlib.contextmanager
def compact(on: bool):
    was = _native.testing.sim_compact_columns(on)
    try:
        yield
    finally:
        _native.testing.sim_compact_columns(was)


def _compile(body, returns, params):
    return orion.compile_mil(program(params, body, returns), {}, device="sim", profile=PROFILE)


def _inputs(params, seed):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal(s).astype(np.float16) for k, (_, s) in params.items()}


def _check(body, returns, params, hints, min_steps=1):
    """Every hint: live columns == the full run's, compact on == off; the compact path ran at least
    ``min_steps`` steps per run. A full run on other inputs comes first each time (stale arena)."""
    prog = _compile(body, returns, params)
    x, other = _inputs(params, 0), _inputs(params, 1)
    want = {k: np.array(v) for k, v in prog.run(x).items()}
    for hint in hints:
        got = {}
        _native.testing.sim_compact_steps()
        for on in (True, False):
            with compact(on):
                prog.run(other)
                got[on] = {k: np.array(v) for k, v in prog.run(x, live_columns=hint).items()}
            ran = _native.testing.sim_compact_steps()
            assert (ran >= min_steps) if on else ran == 0, (hint, on, ran)
        for k in want:
            n = hint[k] if isinstance(hint, dict) else hint
            for on in (True, False):
                assert np.array_equal(_bits(got[on][k][..., :n]), _bits(want[k][..., :n])), (k, hint, on)
    return prog


X = ("fp16", [1, C, 1, W])


def test_elementwise_chain_and_a_value_also_read_whole():
    """exp -> mul by a per-channel const -> add x -> sigmoid: all compact; `m` is also read by a reduction
    over the channels (needs its full layout: scattered), and `r` broadcast back over the channels."""
    body = [stmt("e", "fp16", [1, C, 1, W], "exp", x="x"),
            const("g", np.linspace(-1, 1, C).reshape(1, C, 1, 1), "fp16"),
            stmt("m", "fp16", [1, C, 1, W], "mul", x="e", y="g"),
            stmt("a", "fp16", [1, C, 1, W], "add", x="m", y="x"),
            const("ax", [1], tensor=True), const("kd", True, "bool"),
            stmt("r", "fp16", [1, 1, 1, W], "reduce_sum", x="m", axes="ax", keep_dims="kd"),
            stmt("b", "fp16", [1, C, 1, W], "mul", x="a", y="r"),
            stmt("y", "fp16", [1, C, 1, W], "sigmoid", x="b")]
    _check(body, ["y"], {"x": X}, [1, 2, 3], min_steps=5)


def test_a_value_read_at_two_widths():
    """`e` is computed 5 columns wide (output z's hint) and read 1 column wide by y's chain: the narrower
    reader must not take the wider compact form for its own."""
    body = [stmt("e", "fp16", [1, C, 1, W], "exp", x="x"),
            stmt("y", "fp16", [1, C, 1, W], "mul", x="e", y="x"),
            stmt("z", "fp16", [1, C, 1, W], "add", x="e", y="e")]
    _check(body, ["y", "z"], {"x": X}, [{"y": 1, "z": 4}, {"y": 4, "z": 1}, {"y": 2, "z": 2}], min_steps=2)


def test_operands_broadcast_along_outer_axes():
    """A per-column row [1, 1, 1, W] (a norm's statistics) and a runtime per-channel vector are read in
    place; the output is a program input's shape both ways."""
    params = {"x": X, "s": ("fp16", [1, 1, 1, W]), "v": ("fp16", [1, C, 1, 1])}
    body = [stmt("a", "fp16", [1, C, 1, W], "mul", x="x", y="s"),
            stmt("b", "fp16", [1, C, 1, W], "add", x="v", y="a"),
            stmt("y", "fp16", [1, C, 1, W], "real_div", x="b", y="x")]
    _check(body, ["y"], params, [1, 3], min_steps=3)


def test_output_widened_by_a_ones_const():
    """C04's output widening ([1, C, 1, W, 1] x ones [1, 1, 1, 1, 3] -> [1, C, 1, 3W]): the compact form of
    the value read broadcast along the inner axis, the ones row read unexpanded."""
    body = [stmt("e", "fp16", [1, C, 1, W], "tanh", x="x"),
            const("s5", [1, C, 1, W, 1], tensor=True),
            stmt("e5", "fp16", [1, C, 1, W, 1], "reshape", x="e", shape="s5"),
            const("ones", np.ones((1, 1, 1, 1, 3)), "fp16"),
            stmt("w", "fp16", [1, C, 1, W, 3], "mul", x="e5", y="ones"),
            const("so", [1, C, 1, 3 * W], tensor=True),
            stmt("y", "fp16", [1, C, 1, 3 * W], "reshape", x="w", shape="so")]
    _check(body, ["y"], {"x": X}, [3, 6], min_steps=2)


def test_projection_and_unpadding_slice_feed_the_chain():
    """A weight-input matmul's live column and a slice unpadding a 48-wide input straight into compact form,
    then element-wise steps; n = 1 (via the transposed product) and n = 4 (a quarter of the width: the
    widest compact form)."""
    params = {"w": ("fp16", [1, 1, C, C]), "xp": ("fp16", [1, C, 1, 3 * W])}
    body = [const("b0", [0, 0, 0, 0], tensor=True), const("sz", [1, C, 1, W], tensor=True),
            stmt("x", "fp16", [1, C, 1, W], "slice_by_size", x="xp", begin="b0", size="sz"),
            const("s1", [1, 1, C, W], tensor=True),
            stmt("x1", "fp16", [1, 1, C, W], "reshape", x="x", shape="s1"),
            const("f", False, "bool"),
            stmt("p", "fp16", [1, 1, C, W], "matmul", x="w", y="x1", transpose_x="f", transpose_y="f"),
            const("s2", [1, C, 1, W], tensor=True),
            stmt("p2", "fp16", [1, C, 1, W], "reshape", x="p", shape="s2"),
            stmt("sg", "fp16", [1, C, 1, W], "sigmoid", x="p2"),
            stmt("g", "fp16", [1, C, 1, W], "mul", x="p2", y="sg"),
            stmt("y", "fp16", [1, C, 1, W], "mul", x="g", y="x")]
    _check(body, ["y"], params, [1, 4], min_steps=5)


# ---- models --------------------------------------------------------------------------------------------

def _generate_logits(model, ids, n):
    eng = model.engine
    eng.reset(len(ids) + n + 1)
    out = [np.array(eng.prefill(ids))]
    for _ in range(n):
        out.append(np.array(eng.step(int(np.argmax(out[-1])))))
    return np.stack(out)


@pytest.mark.parametrize("name", ["llama3", "qwen3", "gemma3"])
def test_shared_layer_decode_identical_either_way(name, tmp_path):
    """Prefill + decode logits, a batch of 3 and speculative decoding: bit-identical with the compact path
    on and off (shared layers: weights as program inputs, as at real depth)."""
    m = load(os.path.join(FIXTURES, name), device="sim", cache=str(tmp_path), layers="shared")
    ids = [3, 17, 5, 9, 2, 11]
    runs, batches = {}, {}
    _native.testing.sim_compact_steps()
    for on in (True, False):
        with compact(on):
            runs[on] = _generate_logits(m, ids, 6)
            batches[on] = [g.tokens for g in m.generate_batch([ids, ids[:3], ids[2:]], max_tokens=5, temperature=0)]
            batches[on].append(m.generate(ids * 3, speculative="prompt-lookup", max_tokens=8, temperature=0).tokens)
        ran = _native.testing.sim_compact_steps()
        assert (ran > 0) if on else ran == 0, (on, ran)
    assert np.array_equal(_bits(runs[True]), _bits(runs[False]))
    assert batches[True] == batches[False]


def test_attention_reads_its_queries_compact():
    """Attention over a cache: the scaled queries (compact) are the transposed x of the score matmul, read
    compact; the scores' rows come out compact; softmax and the value matmul read them whole."""
    params = {"x": X, "kc": ("fp16", [1, C, 1, 32])}
    body = [const("qs", 0.25, "fp16"), stmt("qm", "fp16", [1, C, 1, W], "mul", x="x", y="qs"),
            const("sq", [1, 1, C, W], tensor=True), stmt("q", "fp16", [1, 1, C, W], "reshape", x="qm", shape="sq"),
            const("sk", [1, 1, C, 32], tensor=True), stmt("k", "fp16", [1, 1, C, 32], "reshape", x="kc", shape="sk"),
            const("f", False, "bool"), const("t", True, "bool"),
            stmt("sc", "fp16", [1, 1, W, 32], "matmul", x="q", y="k", transpose_x="t", transpose_y="f"),
            const("a3", 3), stmt("p", "fp16", [1, 1, W, 32], "softmax", x="sc", axis="a3"),
            stmt("o", "fp16", [1, 1, C, W], "matmul", x="k", y="p", transpose_x="f", transpose_y="t"),
            const("so", [1, C, 1, W], tensor=True), stmt("y", "fp16", [1, C, 1, W], "reshape", x="o", shape="so")]
    _check(body, ["y"], params, [1, 2, 4], min_steps=2)


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident set from /proc")
def test_compact_forms_reuse_the_space_of_values_no_longer_read():
    """A chain of 100 element-wise steps over [1, 256, 1, 1024] with 128 live columns: each compact form is 64 KB,
    all of them 6.4 MB; slots reused once a value is no longer read keep the run's compact area to a few
    (the area is per thread: measured on a fresh thread, whose other first-use costs are ~1 MB)."""
    import threading
    shape = [1, 256, 1, 1024]
    body = [stmt("v0", "fp16", shape, "tanh", x="x")]
    for i in range(1, 100):
        body.append(stmt(f"v{i}", "fp16", shape, "mul" if i % 2 else "add", x=f"v{i - 1}", y="x"))
    prog = _compile(body, ["v99"], {"x": ("fp16", shape)})
    x = {"x": np.random.default_rng(0).standard_normal(shape).astype(np.float16)}
    want = np.array(prog.run(x)["v99"])
    out, grew = {}, {}

    def run():
        before = _rss_bytes()
        out["y"] = np.array(prog.run(x, live_columns=128)["v99"])
        grew["bytes"] = _rss_bytes() - before
    _native.testing.sim_compact_steps()
    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert _native.testing.sim_compact_steps() == 100
    assert np.array_equal(_bits(out["y"][..., :128]), _bits(want[..., :128]))
    assert grew["bytes"] < 3 << 20, grew          # 100 forms would be 6.4 MB
