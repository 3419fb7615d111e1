"""runtime Chain (``_native.Chain``): evaluations run in one call, each step binding surfaces, copying columns
between fp16 [rows, columns] views (strided, at the cache position or column 0), evaluating, and optionally
checking the live columns of an output for values outside fp16's range; bad views and sizes are InputErrors
raised before anything runs."""

import numpy as np
import orion
import pytest
from orion import _native
from runtime_programs import add_program, rand

C, W = 64, 128


def _views(prog):
    a = prog.input_surface("a").view("fp16", [1, C, 1, W])[0, :, 0, :]
    b = prog.input_surface("b").view("fp16", [1, C, 1, W])[0, :, 0, :]
    z = prog.output_surface("z").view("fp16", [1, C, 1, W])[0, :, 0, :]
    return a, b, z


def test_a_chain_feeds_each_eval_from_the_last_and_writes_at_the_position():
    """z = a + b twice: the second eval's a is the first's z (n columns), b a per-step array copied whole; the
    first z is also written into a 'cache' at columns pos.. ; results equal the same evals done by hand."""
    with orion.compile_mil(add_program(shape=(1, C, 1, W))) as p, orion.compile_mil(add_program(shape=(1, C, 1, W))) as q:
        pa, pb, pz = _views(p)
        qa, qb, qz = _views(q)
        a0, b0, b1 = rand((C, W), 1), rand((C, W), 2), rand((C, W), 3)
        cache = np.zeros((C, 40), np.float16)
        strided = np.zeros((C, 3 * W), np.float16)[:, ::3]          # a widened output's columns are 3 apart
        strided[...] = b1
        pa[...], pb[...] = a0, b0
        ch = _native.Chain()
        ch.add_step(p._p, [], [], None, pz)
        ch.add_step(q._p, [], [(pz, qa, -1, False), (pz, cache, -1, True), (strided, qb, W, False)], None, qz)
        assert len(ch) == 2
        n, pos = 5, 17
        bad, warnings = ch.run(n, pos)
        assert bad == -1 and warnings == []
        z0 = (a0.astype(np.float32) + b0).astype(np.float16)
        np.testing.assert_array_equal(pz, z0)
        np.testing.assert_array_equal(qa[:, :n], z0[:, :n])
        np.testing.assert_array_equal(cache[:, pos:pos + n], z0[:, :n])
        assert not cache[:, :pos].any() and not cache[:, pos + n:].any()
        np.testing.assert_array_equal(qb, b1)
        np.testing.assert_array_equal(qz[:, :n], (z0[:, :n].astype(np.float32) + b1[:, :n]).astype(np.float16))


def test_the_check_stops_the_chain_at_the_first_non_finite_output():
    with orion.compile_mil(add_program(shape=(1, C, 1, W))) as p, orion.compile_mil(add_program(shape=(1, C, 1, W))) as q:
        pa, pb, pz = _views(p)
        qa, _, qz = _views(q)
        pa[...], pb[...] = np.float16(60000), np.float16(60000)  # 120000 leaves fp16: inf
        qa[...] = 7
        ch = _native.Chain()
        ch.add_step(p._p, [], [], None, pz)
        ch.add_step(q._p, [], [], None, qz)
        assert ch.run(1, 0)[0] == 0
        assert not qz.any()                                          # the second step did not run
        pa[...] = 1
        assert ch.run(1, 0)[0] == -1


def test_bad_views_and_sizes_are_input_errors_before_anything_runs():
    with orion.compile_mil(add_program(shape=(1, C, 1, W))) as p:
        pa, _, pz = _views(p)
        ch = _native.Chain()
        with pytest.raises(orion.InputError, match="rows"):
            ch.add_step(p._p, [], [(pz[:10], pa, -1, False)])
        with pytest.raises(orion.InputError, match="float16"):
            ch.add_step(p._p, [], [(np.zeros((C, W), np.float32), pa, -1, False)])
        with pytest.raises(orion.InputError, match="input slot"):
            ch.add_step(p._p, [(99, p.input_surface("a"))], [])
        with pytest.raises(orion.InputError, match="2-D arrays"):
            ch.add_step(p._p, [], [(pz.reshape(1, C, W), pa, -1, False)])
        with pytest.raises(orion.InputError, match="native Program"):
            ch.add_step("not a program", [], [])
        ch.add_step(p._p, [], [(pz, np.zeros((C, 8), np.float16), -1, True)])
        evals = orion.counters()["evals"]
        with pytest.raises(orion.InputError, match="do not fit"):
            ch.run(4, 5)                                              # columns 5..8 of an 8-column cache
        with pytest.raises(orion.InputError, match="n must be >= 1"):
            ch.run(0, 0)
        assert orion.counters()["evals"] == evals
        assert ch.run(4, 4)[0] == -1


def test_a_filled_prefix_copy_moves_columns_up_to_pos_plus_n_after_the_copies_before_it():
    """cols -2: a cache held on the host is copied into a program's input before its eval - its columns
    0 .. pos + n, after the step's earlier copies wrote the new columns into it (copies run in order); the
    columns past them are left as they were. -2 at pos is refused (a prefix starts at column 0)."""
    with orion.compile_mil(add_program(shape=(1, C, 1, W))) as p, orion.compile_mil(add_program(shape=(1, C, 1, W))) as q:
        pa, pb, pz = _views(p)
        qa, qb, qz = _views(q)
        pa[...], pb[...] = rand((C, W), 4), rand((C, W), 5)
        held = rand((C, 40), 6)
        qa[...] = np.float16(9)
        ch = _native.Chain()
        ch.add_step(p._p, [], [], None, pz)
        ch.add_step(q._p, [], [(pz, held, -1, True), (held, qa, -2, False)], None, qz)
        n, pos = 3, 11
        before = held.copy()
        assert ch.run(n, pos)[0] == -1
        np.testing.assert_array_equal(held[:, pos:pos + n], pz[:, :n])
        np.testing.assert_array_equal(held[:, :pos], before[:, :pos])
        np.testing.assert_array_equal(qa[:, :pos + n], held[:, :pos + n])
        assert (qa[:, pos + n:] == 9).all()
        with pytest.raises(orion.InputError, match="do not fit"):
            ch.run(n, 38)                                             # 41 columns of a 40-column cache
        with pytest.raises(orion.InputError, match="-2"):
            ch.add_step(q._p, [], [(held, qa, -2, True)])
        with pytest.raises(orion.InputError, match="-2"):
            ch.add_step(q._p, [], [(held, qa, -3, False)])
