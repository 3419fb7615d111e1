"""Dead-column skipping (``eval(live_columns=n)``): the simulator computes only what the first ``n``
columns of the outputs read, and those columns are bit-identical to a full evaluation.

Pinned here: every decode (S=16) and prefill (S=32) stage program of GPT-2 and of each Llama-style
fixture family is exact for several ``n`` and proves every step (no step computed whole); adversarial
programs that mix along the padded axis (transpose, a reduction, softmax or a contraction over it,
slices / concats / reshapes that move it) stay exact, and the ones that mix are computed whole with a
note saying why. Each live run follows a full run on other inputs, so a step wrongly skipped would
expose that run's stale values.
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import orion
from orion.models import load

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "models"))
from models_helpers import tiny_gpt2, weights16  # noqa: E402

from simutil import const, program, stmt  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
FAMILIES = sorted(n for n in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, n, "config.json")))


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16 if a.dtype == np.float16 else np.uint32)


def _summary(notes):
    """(prefix, all, none) step counts from the analysis' summary line."""
    line = notes[-1]
    assert line.startswith("summary: "), notes
    m = re.match(r"summary: (\d+) of \d+ steps compute a prefix, (\d+) all, (\d+) none", line)
    return int(m[1]), int(m[2]), int(m[3])


def _stage_feeds(stage, seed):
    rng = np.random.default_rng(seed)
    feed = {n: rng.standard_normal(b.shape).astype(np.float16) for n, b in stage.inputs.items() if n not in stage.cache}
    cache = {n: rng.standard_normal(c.shape).astype(np.float16) for n, c in stage.cache.items()}
    return feed, cache


def _run(stage, feed, cache, live=None):
    for n, c in cache.items():
        stage.cache[n][...] = c
    return {k: np.array(v) for k, v in stage.run(feed, live=live).items()}


def _check_stage(stage, S):
    a, b = _stage_feeds(stage, 1), _stage_feeds(stage, 2)
    want = _run(stage, *b)
    for n in (1, 5, S - 1):
        _run(stage, *a)                                    # stale values everywhere
        got = _run(stage, *b, live=n)
        for k in want:
            assert np.array_equal(_bits(got[k][..., :n]), _bits(want[k][..., :n])), (stage.prog.mil[:80], k, n)
        notes = stage.prog.live_notes(stage.live_columns(n))
        prefix, whole, _ = _summary(notes)
        # every op proved: only the copies of the KV cache inputs (read whole by attention) are whole
        assert prefix > 0 and len(notes) - 1 == whole, notes
        assert all("_cache_unpad' computed whole: read whole" in m for m in notes[:-1]), notes


def _stages(engine, S):
    for st in engine.program_set(S, engine.ctx_buckets[0]):
        yield from getattr(st, "parts", [st])


@pytest.mark.parametrize("S", [16, 32])
def test_gpt2_stage_programs_live_columns_exact(S):
    from orion.models import Model
    cfg = tiny_gpt2()
    m = Model(cfg, weights16(cfg), device="sim")
    for st in _stages(m.engine, S):
        _check_stage(st, S)


@pytest.mark.parametrize("name", FAMILIES)
def test_family_stage_programs_live_columns_exact(name, tmp_path):
    m = load(os.path.join(FIXTURES, name), device="sim", cache=str(tmp_path))
    for S in (16, 32):
        for st in _stages(m.engine, S):
            _check_stage(st, S)


@pytest.mark.parametrize("name", ["gpt2", "llama3"])
def test_batch_region_programs_live_columns_exact(name, tmp_path):
    """Batched decode's programs (one cache region per column, the columns on the attention matmuls'
    outer batch axis) skip the dead sequences' attention too: every step proved, live columns exact."""
    if name == "gpt2":
        from orion.models import Model
        cfg = tiny_gpt2()
        eng = Model(cfg, weights16(cfg), device="sim").engine
    else:
        eng = load(os.path.join(FIXTURES, name), device="sim", cache=str(tmp_path)).engine
    for i in range(eng.fam.n_stages(eng.cfg)):
        st = eng._stage(i, 16, 64, regions=True)
        try:
            for part in getattr(st, "parts", [st]):
                _check_stage(part, 16)
        finally:
            st.release()


# ---- adversarial programs -------------------------------------------------------------------------

C, W = 8, 16
PROFILE = orion.sim.Profile(strictness="permissive", min_surface_bytes=2)  # concat (C01) allowed
X = ("fp16", [1, C, 1, W])


def _compile(body, returns, params=None):
    return orion.compile_mil(program(params or {"x": X}, body, returns), {}, device="sim", profile=PROFILE)


def _live_vs_full(prog, inputs, n):
    """Full result, live result (after a full run on other inputs) and the notes, for hint n."""
    other = {k: np.random.default_rng(9).standard_normal(v.shape).astype(v.dtype) for k, v in inputs.items()}
    want = {k: np.array(v) for k, v in prog.run(inputs).items()}
    prog.run(other)
    got = {k: np.array(v) for k, v in prog.run(inputs, live_columns=n).items()}
    return want, got, prog.live_notes(n)


def _x(seed=0):
    return {"x": np.random.default_rng(seed).standard_normal((1, C, 1, W)).astype(np.float16)}


ELEMENTWISE = [stmt("e", "fp16", [1, C, 1, W], "exp", x="x"), const("h", 0.5, "fp16"),
               stmt("y", "fp16", [1, C, 1, W], "mul", x="e", y="h")]

CASES = {
    # mix along the columns: computed whole, with a note naming the step (or None: all proved)
    "softmax over the columns": ([const("ax", 3), stmt("y", "fp16", [1, C, 1, W], "softmax", x="x", axis="ax")],
                                 ["y"], "'y' computed whole"),
    "reduction over the columns": ([const("ax", [3], tensor=True), const("kd", True, "bool"),
                                    stmt("r", "fp16", [1, C, 1, 1], "reduce_sum", x="x", axes="ax", keep_dims="kd"),
                                    stmt("y", "fp16", [1, C, 1, W], "add", x="x", y="r")],
                                   ["y"], "'r' computed whole"),
    "matmul contracting the columns": ([const("f", False, "bool"), const("t", True, "bool"),
                                        stmt("m", "fp16", [1, C, 1, 1], "matmul", x="x", y="x", transpose_x="f",
                                             transpose_y="t"),
                                        stmt("y", "fp16", [1, C, 1, W], "add", x="x", y="m")],
                                       ["y"], "'m' computed whole"),
    "transpose then softmax over the moved columns": (
        [const("p", [0, 3, 2, 1], tensor=True), stmt("t", "fp16", [1, W, 1, C], "transpose", x="x", perm="p"),
         const("ax", 1), stmt("s", "fp16", [1, W, 1, C], "softmax", x="t", axis="ax"),
         stmt("y", "fp16", [1, C, 1, W], "transpose", x="s", perm="p")],
        ["y"], "'s' computed whole"),
    "slice that shifts the columns (reads past the prefix)": (
        [const("b", [0, 0, 0, 3], tensor=True), const("z", [1, C, 1, W - 3], tensor=True),
         stmt("s", "fp16", [1, C, 1, W - 3], "slice_by_size", x="x", begin="b", size="z"),
         const("b2", [0, 0, 0, 0], tensor=True), const("z2", [1, C, 1, 3], tensor=True),
         stmt("s2", "fp16", [1, C, 1, 3], "slice_by_size", x="x", begin="b2", size="z2"),
         const("ax", 3), const("il", False, "bool"),
         stmt("y", "fp16", [1, C, 1, W], "concat", values="(s, s2)", axis="ax", interleave="il")],
        ["y"], "none"),
    "reversed slice": (
        [const("b", [0, 0, 0, -1], tensor=True), const("e", [1, C, 1, 0], tensor=True),
         const("st", [1, 1, 1, -1], tensor=True), const("bm", [False, False, False, False], "bool", tensor=True),
         const("em", [False, False, False, True], "bool", tensor=True),
         stmt("y", "fp16", [1, C, 1, W], "slice_by_index", x="x", begin="b", end="e", stride="st", begin_mask="bm",
              end_mask="em")],
        ["y"], "'y' computed whole"),
    "reshape folding the columns into channels": (
        [const("sh", [1, C * W // 4, 1, 4], tensor=True),
         stmt("r", "fp16", [1, C * W // 4, 1, 4], "reshape", x="x", shape="sh"),
         const("ax", 1), stmt("s", "fp16", [1, C * W // 4, 1, 4], "softmax", x="r", axis="ax"),
         const("sh2", [1, C, 1, W], tensor=True), stmt("y", "fp16", [1, C, 1, W], "reshape", x="s", shape="sh2")],
        ["y"], "'s' computed whole"),
    "elementwise only (all steps proved)": (ELEMENTWISE, ["y"], None),
    "norm over channels, attention over a cache (all steps proved)": (
        [const("ax", [1], tensor=True), const("eps", 1e-3, "fp16"),
         stmt("n", "fp16", [1, C, 1, W], "layer_norm", x="x", axes="ax", epsilon="eps"),
         const("f", False, "bool"), const("t", True, "bool"),
         const("sq", [1, 1, C, W], tensor=True), stmt("q", "fp16", [1, 1, C, W], "reshape", x="n", shape="sq"),
         const("sk", [1, 1, C, 32], tensor=True), stmt("k", "fp16", [1, 1, C, 32], "reshape", x="kc", shape="sk"),
         stmt("sc", "fp16", [1, 1, W, 32], "matmul", x="q", y="k", transpose_x="t", transpose_y="f"),
         const("a3", 3), stmt("p", "fp16", [1, 1, W, 32], "softmax", x="sc", axis="a3"),
         stmt("o", "fp16", [1, 1, C, W], "matmul", x="k", y="p", transpose_x="f", transpose_y="t"),
         const("so", [1, C, 1, W], tensor=True), stmt("y", "fp16", [1, C, 1, W], "reshape", x="o", shape="so")],
        ["y"], None),
    "columns on a matmul's outer batch axis, the cache broadcast along it (all steps proved)": (
        [const("p", [3, 1, 2, 0], tensor=True), stmt("t", "fp16", [W, C, 1, 1], "transpose", x="x", perm="p"),
         const("sq", [W, 1, 1, C], tensor=True), stmt("q", "fp16", [W, 1, 1, C], "reshape", x="t", shape="sq"),
         const("sk", [1, 1, C, 32], tensor=True), stmt("k", "fp16", [1, 1, C, 32], "reshape", x="kc", shape="sk"),
         const("f", False, "bool"), const("tr", True, "bool"),
         stmt("sc", "fp16", [W, 1, 1, 32], "matmul", x="q", y="k", transpose_x="f", transpose_y="f"),
         const("a3", 3), stmt("pr", "fp16", [W, 1, 1, 32], "softmax", x="sc", axis="a3"),
         stmt("o", "fp16", [W, 1, 1, C], "matmul", x="pr", y="k", transpose_x="f", transpose_y="tr"),
         const("so", [W, C, 1, 1], tensor=True), stmt("r", "fp16", [W, C, 1, 1], "reshape", x="o", shape="so"),
         stmt("y", "fp16", [1, C, 1, W], "transpose", x="r", perm="p")],
        ["y"], None),
    "columns on a matmul's inner batch axis": (
        [const("p", [0, 3, 2, 1], tensor=True), stmt("q", "fp16", [1, W, 1, C], "transpose", x="x", perm="p"),
         const("sk", [1, 1, C, 32], tensor=True), stmt("k", "fp16", [1, 1, C, 32], "reshape", x="kc", shape="sk"),
         const("f", False, "bool"), const("tr", True, "bool"),
         stmt("sc", "fp16", [1, W, 1, 32], "matmul", x="q", y="k", transpose_x="f", transpose_y="f"),
         stmt("o", "fp16", [1, W, 1, C], "matmul", x="sc", y="k", transpose_x="f", transpose_y="tr"),
         stmt("y", "fp16", [1, C, 1, W], "transpose", x="o", perm="p")],
        ["y"], "no column rule for its inner batch axis 1"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_adversarial_programs_live_columns_exact(case):
    body, returns, whole_note = CASES[case]
    params = {"x": X}
    inputs = _x()
    if any("kc" in b for b in body):
        params["kc"] = ("fp16", [1, C, 1, 32])
        inputs["kc"] = np.random.default_rng(5).standard_normal((1, C, 1, 32)).astype(np.float16)
    prog = _compile(body, returns, params)
    for n in (1, 4, W - 1):
        want, got, notes = _live_vs_full(prog, inputs, n)
        for k in want:
            assert np.array_equal(_bits(got[k][..., :n]), _bits(want[k][..., :n])), (case, k, n)
        prefix, whole, none = _summary(notes)
        if whole_note is None:
            assert whole == 0, notes
        elif whole_note == "none":     # the concat's second value is not read below n = W - 3
            assert (none > 0) == (n <= W - 3), notes
            assert all("read whole by 'y'" in m for m in notes[:-1]), notes
        else:
            assert whole > 0 and any(whole_note in m for m in notes), notes


def test_prefix_boxes_exact():
    """Element-wise ops compute just the live box where that pays (blocks of >= 32 entries, or any block
    under a transcendental function: gathered, computed, scattered) and the whole tensor otherwise; every
    choice gives the full evaluation's live columns bit for bit."""
    shape = [1, 4, 1, 256]
    body = [stmt("e", "fp16", shape, "exp", x="x"), stmt("s", "fp16", shape, "sigmoid", x="x"),
            stmt("m", "fp16", shape, "mul", x="e", y="s"), const("b", np.arange(4).reshape(1, 4, 1, 1) - 1.5, "fp16"),
            stmt("a", "fp16", shape, "add", x="m", y="b"), stmt("y", "fp16", shape, "relu", x="a")]
    prog = _compile(body, ["y"], {"x": ("fp16", shape)})
    inputs = {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float16)}
    for n in (1, 7, 40, 64, 255):   # 1, 7: boxes for exp / sigmoid only; 40, 64: every op; 255: none
        want, got, notes = _live_vs_full(prog, inputs, n)
        assert np.array_equal(_bits(got["y"][..., :n]), _bits(want["y"][..., :n])), n
        assert _summary(notes)[1:] == (0, 0), notes


def test_hint_per_output_and_validation():
    """``{name: n}`` restricts only the named outputs; a bad hint is an InputError naming it."""
    body = ELEMENTWISE + [stmt("z", "fp16", [1, C, 1, W], "exp", x="y")]
    prog = _compile(body, ["y", "z"])
    want = {k: np.array(v) for k, v in prog.run(_x()).items()}
    got = prog.run(_x(), live_columns={"z": 2})
    assert np.array_equal(_bits(got["y"]), _bits(want["y"]))         # y whole
    assert np.array_equal(_bits(got["z"][..., :2]), _bits(want["z"][..., :2]))
    with pytest.raises(orion.InputError, match="unknown output 'nope'"):
        prog.run(_x(), live_columns={"nope": 1})
    with pytest.raises(orion.InputError, match=">= 0"):
        prog.run(_x(), live_columns=-3)


def test_fp32_io_live_columns_exact():
    """fp32 inputs (rounded to fp16 on read) and outputs (widened on write) keep the live columns exact."""
    prog = orion.compile_mil(program({"x": ("fp32", [1, C, 1, W])}, [stmt("y", "fp32", [1, C, 1, W], "exp", x="x")],
                                     ["y"]), {}, device="sim", profile=PROFILE)
    x = {"x": np.random.default_rng(3).standard_normal((1, C, 1, W)).astype(np.float32)}
    want, got, notes = _live_vs_full(prog, x, 3)
    assert got["y"].dtype == np.float32 and np.array_equal(got["y"][..., :3], want["y"][..., :3])
    assert _summary(notes) == (1, 0, 0)


def test_matmul_c36_saturation_on_live_columns():
    """C36 (|y| >= 32752 -> +-inf) applies to a product's live columns as to a full evaluation, with its
    warning: decode's products compute one column of thousands of rows, checked in one strided pass."""
    M, K, N = 300, 2, 16
    x = np.zeros((1, 1, M, K), np.float16)
    x[0, 0, :, 0] = 1.0
    y = np.zeros((1, 1, K, N), np.float16)
    y[0, 0, 0, :] = 100.0
    x[0, 0, 7, 0], x[0, 0, 250, 0] = 400.0, -327.0    # 40000 -> +inf; -32700 rounds to -32704: stays
    x[0, 0, 123, 0] = 327.52                            # 32752 (fp16 rounding of 327.52 * 100) -> +inf
    body = [const("tx", False, "bool"), const("ty", False, "bool"),
            stmt("z", "fp16", [1, 1, M, N], "matmul", transpose_x="tx", transpose_y="ty", x="x", y="y")]
    prog = _compile(body, ["z"], {"x": ("fp16", [1, 1, M, K]), "y": ("fp16", [1, 1, K, N])})
    for n in (1, 3, N):
        with pytest.warns(orion.AneSimWarning, match=r"C36"):
            z = np.array(prog.run({"x": x, "y": y}, live_columns=n)["z"])[0, 0, :, :n]
        want = np.matmul(x[0, 0].astype(np.float32), y[0, 0].astype(np.float32))[:, :n].astype(np.float16)
        want[np.abs(want) >= 32752] = np.copysign(np.inf, want[np.abs(want) >= 32752])
        assert np.array_equal(_bits(z), _bits(want)), n
        assert np.isposinf(z[7]).all() and np.isposinf(z[123]).all() and (z[250] == np.float16(-32704)).all()
