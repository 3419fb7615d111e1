"""The CPU compute kernels (src/orion_native/cpu/kernels) through the _native.testing hooks and gemm_f16.

References are float64 numpy. Tolerances (fp16 ulp = 2^-10 relative at 1.0):
- conversions, +,-,*,/, max/min, sqrt, clip, transpose: exact (fp32 then fp16 rounding of a correctly
  rounded fp32 result equals direct rounding: 24 >= 2*11 + 2 bits).
- exp/log/tanh/sigmoid/silu/gelu: every finite fp16 input, result within < 1 fp16 ulp of the exact
  value (faithful), and correctly rounded for > 99.9 % of inputs.
- gemm / sums: |err| <= 2^-10 * sum_k |a||b| (fp32 accumulation plus one fp16 rounding) + 2^-24.
Every ISA the machine supports must give bit-identical results (NaN payloads aside), and so must 1 vs 2
threads.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

from orion import _native as native  # noqa: E402  (fail loudly: a broken build must not skip)

ISAS = [i for i in ("scalar", "avx2", "avx512", "neon") if native.testing.force_isa(i)]
native.testing.force_isa("best")
F16 = np.float16
ALL_F16 = np.arange(65536, dtype=np.uint16).view(F16)
FINITE_F16 = ALL_F16[np.isfinite(ALL_F16)]


@pytest.fixture(autouse=True)
def _restore():
    yield
    native.testing.force_isa("best")
    native.set_num_threads(0)


def bits(y: np.ndarray) -> np.ndarray:
    """Raw bits with every NaN made the same (payloads may differ between code paths)."""
    u = y.view(np.uint16 if y.dtype == F16 else np.uint32).copy()
    u[np.isnan(y)] = 0x7E00 if y.dtype == F16 else 0x7FC00000
    return u


def rnd(shape, rng, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(F16)


def per_isa(fn):
    """fn() under each ISA; returns {isa: result}."""
    out = {}
    for isa in ISAS:
        assert native.testing.force_isa(isa)
        out[isa] = fn()
    native.testing.force_isa("best")
    return out


def assert_same_everywhere(fn):
    """fn() gives identical bits for every ISA and for 1 vs 2 threads."""
    res = per_isa(fn)
    first = bits(res[ISAS[0]])
    for isa, r in res.items():
        np.testing.assert_array_equal(bits(r), first, err_msg=f"ISA {isa} differs from {ISAS[0]}")
    for n in (1, 2):
        native.set_num_threads(n)
        np.testing.assert_array_equal(bits(fn()), first, err_msg=f"{n} threads differ")
    native.set_num_threads(0)
    return res[ISAS[0]]


def ulp16(v: np.ndarray) -> np.ndarray:
    e = np.floor(np.log2(np.maximum(np.abs(v), 2.0**-14)))
    return 2.0 ** (e - 10)


# ---- infrastructure ---------------------------------------------------------------------------

def test_isa_reporting():
    assert native.kernel_isa() in ("avx512", "avx2", "neon", "scalar")
    assert "scalar" in ISAS
    assert not native.testing.force_isa("nonsense")
    assert native.num_threads() >= 1


def test_parallel_for_covers_each_item_once_and_propagates():
    native.set_num_threads(2)
    assert native.num_threads() == 2
    for n, grain in [(1, 1), (7, 1), (1000, 1), (1000, 300), (100_000, 17)]:
        assert native.testing.parallel_for_test(n, grain) == n
    with pytest.raises(RuntimeError, match="boom"):
        native.testing.parallel_for_test(1000, 1, True)
    assert native.testing.parallel_for_test(1000, 1) == 1000  # pool still healthy after an exception
    native.set_num_threads(1)
    assert native.testing.parallel_for_test(1000, 1) == 1000


@pytest.mark.parametrize("env,expect", [({"ORION_ISA": "scalar"}, "scalar"), ({"ORION_NUM_THREADS": "1"}, 1),
                                        ({"ORION_NUM_THREADS": "3"}, 3)])
def test_environment_overrides(env, expect):
    code = ("from orion import _native as n; import numpy as np; a = np.ones((300, 300), np.float16); "
            "assert (n.gemm_f16(a, a) == 300).all(); print(n.kernel_isa(), n.num_threads())")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    isa, threads = out.stdout.split()
    assert (isa if isinstance(expect, str) else int(threads)) == expect


def test_concurrent_callers_from_python_threads():
    rng = np.random.default_rng(1)
    a, b = rnd((3, 200, 150), rng), rnd((3, 150, 170), rng)
    x = rnd((300_000,), rng)
    want_c, want_y = native.gemm_f16(a, b), native.testing.unary("tanh", x)
    errors = []

    def work():
        try:
            for _ in range(5):
                np.testing.assert_array_equal(native.gemm_f16(a, b), want_c)
                np.testing.assert_array_equal(native.testing.unary("tanh", x), want_y)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors


# ---- conversions ------------------------------------------------------------------------------

def test_f16_to_f32_all_values():
    ref = ALL_F16.astype(np.float32)
    for isa, y in per_isa(lambda: native.convert_fp(ALL_F16)).items():
        fin = ~np.isnan(ALL_F16)
        np.testing.assert_array_equal(y[fin].view(np.uint32), ref[fin].view(np.uint32), err_msg=isa)
        # NaN: quiet, sign and payload kept (as F16C / IEEE conversion)
        h = ALL_F16.view(np.uint16)[~fin].astype(np.uint32)
        want = ((h & 0x8000) << 16) | 0x7F800000 | ((h & 0x3FF) << 13) | 0x00400000
        np.testing.assert_array_equal(y[~fin].view(np.uint32), want, err_msg=isa)


def test_f16_round_trip_all_values():
    for isa in ISAS:
        native.testing.force_isa(isa)
        back = native.convert_fp(native.convert_fp(ALL_F16))
        fin = ~np.isnan(ALL_F16)
        np.testing.assert_array_equal(back.view(np.uint16)[fin], ALL_F16.view(np.uint16)[fin], err_msg=isa)
        assert np.isnan(back[~fin]).all()


def test_f32_to_f16_rounding():
    rng = np.random.default_rng(2)
    rand_bits = rng.integers(0, 2**32, size=1_000_000, dtype=np.uint64).astype(np.uint32)
    # edges: ties at every fp16 boundary (normal, subnormal, overflow), around 2^-25 and 65520
    h = np.arange(0, 0x7C00, dtype=np.uint32)
    mid = (h.astype(np.uint32) << 13) + 0x38000000 + (1 << 12)  # halfway between fp16 h and h+1
    special = np.array([0x477FF000, 0x477FEFFF, 0x477FF001, 0x33000000, 0x33000001, 0x32FFFFFF,
                        0x7F800000, 0xFF800000, 0x7FC00000, 0x7F800001, 0, 0x80000000, 0x387FE000,
                        0x387FF000, 0x38800000], dtype=np.uint32)
    pats = np.concatenate([rand_bits, mid, mid - 1, mid + 1, special, special | 0x80000000])
    f = pats.view(np.float32)
    with np.errstate(all="ignore"):
        ref = f.astype(F16)  # numpy: round to nearest even, overflow to inf
    nan = np.isnan(f)
    for isa, y in per_isa(lambda: native.convert_fp(f)).items():
        np.testing.assert_array_equal(y.view(np.uint16)[~nan], ref.view(np.uint16)[~nan], err_msg=isa)
        assert np.isnan(y[nan]).all(), isa
    # every ISA produces the same NaN bits too
    res = per_isa(lambda: native.convert_fp(f))
    for isa in ISAS:
        np.testing.assert_array_equal(res[isa].view(np.uint16), res["scalar"].view(np.uint16))


def test_convert_rejects_other_dtypes():
    with pytest.raises((TypeError, ValueError)):
        native.convert_fp(np.zeros(3, np.float64))


# ---- GEMM -------------------------------------------------------------------------------------

def gemm_ref(a, b, ta, tb):
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if ta:
        a64 = np.swapaxes(a64, -1, -2)
    if tb:
        b64 = np.swapaxes(b64, -1, -2)
    return a64 @ b64, np.abs(a64) @ np.abs(b64)


def check_gemm(c, a, b, ta, tb, f32_out=False):
    ref, mag = gemm_ref(a, b, ta, tb)
    assert c.shape == ref.shape
    k = a.shape[-2] if ta else a.shape[-1]
    tol = (k * 2.0**-24 * 1.01 if f32_out else 2.0**-10) * mag + 2.0**-24
    err = np.abs(c.astype(np.float64) - ref)
    assert np.all(err <= tol), f"max err {err.max()} vs tol {tol.flat[err.argmax()]}"


def make_operands(rng, batch, m, n, k, ta, tb):
    sa = (k, m) if ta else (m, k)
    sb = (n, k) if tb else (k, n)
    if batch:
        sa, sb = (batch, *sa), (batch, *sb)
    return rnd(sa, rng), rnd(sb, rng)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 5, 3), (37, 65, 300), (100, 33, 513), (13, 129, 64),
                                   (200, 3, 300), (33, 15, 777), (5, 200, 100), (2, 1, 9), (3, 77, 450), (4, 40, 20),
                                   (64, 1, 17), (1, 100, 260)])
def test_gemm_shapes_and_transposes(ta, tb, m, n, k):
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a, b = make_operands(rng, 0, m, n, k, ta, tb)
    c = assert_same_everywhere(lambda: native.gemm_f16(a, b, ta, tb))
    check_gemm(c, a, b, ta, tb)
    c32 = native.gemm_f16(a, b, ta, tb, f32_out=True)
    assert c32.dtype == np.float32
    check_gemm(c32, a, b, ta, tb, f32_out=True)
    # the fp16 result is the fp32 result rounded once
    np.testing.assert_array_equal(c32.astype(F16), c)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, True), (False, True)])
def test_gemm_batched_and_broadcast(ta, tb):
    rng = np.random.default_rng(5)
    a, b = make_operands(rng, 5, 33, 47, 70, ta, tb)
    c = assert_same_everywhere(lambda: native.gemm_f16(a, b, ta, tb))
    check_gemm(c, a, b, ta, tb)
    c1 = native.gemm_f16(a[:1], b, ta, tb)  # batch-1 operand broadcasts
    check_gemm(c1, np.broadcast_to(a[:1], a.shape), b, ta, tb)
    na, nb = make_operands(rng, 3, 40, 2, 50, ta, tb)  # narrow N: computed as C^T = B^T A^T
    check_gemm(assert_same_everywhere(lambda: native.gemm_f16(na, nb, ta, tb)), na, nb, ta, tb)
    big_a, big_b = make_operands(rng, 12, 64, 64, 64, ta, tb)  # many batches: per-batch parallelism
    check_gemm(assert_same_everywhere(lambda: native.gemm_f16(big_a, big_b, ta, tb)), big_a, big_b, ta, tb)


def widened(b, tb, extra=40):
    """b with `extra` more columns of op(b) (random): pushes the product off the narrow-output paths."""
    rng = np.random.default_rng(1)
    pad = rnd((b.shape[0], extra) if not tb else (extra, b.shape[1]), rng)
    return np.concatenate([b, pad], axis=0 if tb else 1)


# Narrow outputs (N <= 32, >= 16 rows) take the panel kernel, vectorised over rows; few rows (5..32) and
# many columns take it on C^T, written transposed. Both must equal the blocked microkernel path bit for
# bit (same in-order fma chain per element) - checked against a wider product that takes that path.
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,n,k", [(16, 16, 64), (17, 1, 30), (40, 15, 100), (33, 17, 257), (64, 32, 9),
                                   (200, 2, 768), (48, 31, 1000),
                                   # 1-4 columns: tiles of several panels (full groups, a short last
                                   # group, a partial last panel)
                                   (300, 1, 200), (128, 1, 17), (135, 3, 64), (290, 4, 50), (72, 2, 33)])
def test_gemm_panel_route_equals_blocked_route(ta, tb, m, n, k):
    rng = np.random.default_rng(m * 7 + n * 3 + k)
    a, b = make_operands(rng, 0, m, n, k, ta, tb)
    c = assert_same_everywhere(lambda: native.gemm_f16(a, b, ta, tb))
    check_gemm(c, a, b, ta, tb)
    wide_b = widened(b, tb, extra=140)  # past 128 columns: the blocked route even for a k-major A in whole panels
    wide = native.gemm_f16(a, wide_b, ta, tb)[:, :n]
    np.testing.assert_array_equal(bits(c), bits(wide))
    c32 = assert_same_everywhere(lambda: native.gemm_f16(a, b, ta, tb, f32_out=True))
    np.testing.assert_array_equal(bits(c32), bits(native.gemm_f16(a, wide_b, ta, tb, f32_out=True)[:, :n]))


def assert_equals_wider_product(rng, a, b, ta, tb, n, k, extra):
    """The product of a and b (and of copies with specials) bit for bit the first n columns of a product with
    `extra` more random columns of op(b) (which takes another route), fp16 and fp32 out, on every ISA and
    thread count; and the product right against float64."""
    sa, sb = with_specials(a, b)
    for x, y in ((a, b), (sa, sb)):
        wide = np.concatenate([y, rnd(y.shape[:-2] + ((extra, k) if tb else (k, extra)), rng)], axis=-2 if tb else -1)
        for f32 in (False, True):
            c = assert_same_everywhere(lambda: native.gemm_f16(x, y, ta, tb, f32_out=f32))
            np.testing.assert_array_equal(bits(c), bits(native.gemm_f16(x, wide, ta, tb, f32_out=f32)[..., :n]))
    check_gemm(native.gemm_f16(a, b, ta, tb), a, b, ta, tb)


# op(A) stored k-major in whole 16-row panels (a weight fed as a program input in the panel layout) with 33..128
# columns (prefill) also takes the panel kernel, A read in place: bit for bit the blocked route, which a wider
# product (past 128 columns) takes.
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch,m,n,k", [(0, 64, 64, 576), (3, 16, 33, 40), (0, 128, 128, 100), (2, 48, 100, 257),
                                         (0, 1536, 64, 17)])
def test_gemm_k_major_panels_route_equals_blocked_route(tb, batch, m, n, k):
    rng = np.random.default_rng(batch + m + n + k)
    a, b = make_operands(rng, batch, m, n, k, True, tb)
    assert_equals_wider_product(rng, a, b, True, tb, n, k, 140)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,n,k", [(16, 128, 64), (5, 16, 33), (31, 100, 70), (32, 33, 129), (12, 300, 8)])
def test_gemm_few_rows_route_equals_blocked_route(ta, tb, m, n, k):
    rng = np.random.default_rng(m * 5 + n + k)
    a, b = make_operands(rng, 0, m, n, k, ta, tb)
    c = assert_same_everywhere(lambda: native.gemm_f16(a, b, ta, tb))
    check_gemm(c, a, b, ta, tb)
    a_tall = np.concatenate([a, rnd((k, 40) if ta else (40, k), rng)], axis=1 if ta else 0)
    np.testing.assert_array_equal(bits(c), bits(native.gemm_f16(a_tall, b, ta, tb)[:m]))
    c = native.gemm_f16(a, b, ta, tb, ldc_pad=5)  # transposed writes respect ldc, padding untouched
    assert (c[:, n:].view(np.uint16) == 0xFFFF).all()
    check_gemm(c[:, :n], a, b, ta, tb)


def with_specials(a, b):
    """Copies of GEMM operands with zeros of both signs, infinities, NaN, subnormals and fp16's extremes."""
    sa, sb = a.copy(), b.copy()
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, -6e-8, 65504, -65504, 1e-5], F16)
    sa.reshape(-1)[::7][:len(specials)] = specials[:len(sa.reshape(-1)[::7])]
    sb.reshape(-1)[3::5][:len(specials)] = specials[::-1][:len(sb.reshape(-1)[3::5])]
    return sa, sb


# One to four rows of op(A) (batched decode's attention: each sequence's query row over its own cache,
# hundreds of 1 x K by K x T products per op) take gemm_rows where the ISA has it (AVX-512): all columns of a
# product in passes of up to 128, items of 256 columns, a transposed B (K stored position-major) read in place
# and transposed 16 x 16 in registers, rows ahead prefetched. Bit for bit the result of the other routes,
# which a taller A (5+ rows) takes, and the same on every ISA (the others keep the microkernel's tiles).
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch,m,n,k", [(192, 1, 128, 64), (192, 1, 64, 128), (7, 2, 300, 33), (3, 3, 17, 200),
                                         (0, 4, 700, 40), (0, 1, 1000, 5), (5, 1, 16, 1), (2, 4, 129, 9),
                                         # a long K (many 16-k groups per block); past 65536 the blocked
                                         # route takes it
                                         (0, 1, 100, 20000), (0, 2, 17, 70000)])
def test_gemm_rows_route_equals_blocked_route(ta, tb, batch, m, n, k):
    rng = np.random.default_rng(batch + m * 7 + n * 3 + k)
    a, b = make_operands(rng, batch, m, n, k, ta, tb)
    sa, sb = with_specials(a, b)
    axis = -1 if ta else -2
    for x, y in ((a, b), (sa, sb)):
        tall = np.concatenate([x, rnd(x.shape[:-1] + (5,) if ta else x.shape[:-2] + (5, k), rng)], axis=axis)
        for f32 in (False, True):
            c = assert_same_everywhere(lambda: native.gemm_f16(x, y, ta, tb, f32_out=f32))
            ref = native.gemm_f16(tall, y, ta, tb, f32_out=f32)[..., :m, :]
            np.testing.assert_array_equal(bits(c), bits(ref))
    check_gemm(native.gemm_f16(a, b, ta, tb), a, b, ta, tb)


# One-row products sharing B (grouped-query attention in decode: the query heads of a KV head against its keys;
# P.V as C^T: each head's V, shared by its query heads, against one probability row) are computed up to four at
# a time, B read once for the group (a transposed B, or one past L1): bit for bit each product alone, on every
# ISA and thread count.
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch,n,k", [(2, 128, 64), (3, 100, 70), (4, 17, 33), (5, 300, 9), (9, 64, 128),
                                       # B past L1 (32 KB): grouped as stored too
                                       (3, 1000, 40), (6, 600, 33), (9, 1024, 64)])
def test_one_row_products_sharing_b_equal_each_product_alone(ta, tb, batch, n, k):
    rng = np.random.default_rng(batch + n + k)
    a, b = make_operands(rng, batch, 1, n, k, ta, tb)
    sa, sb = with_specials(a, b)
    for x, y in ((a, b[:1]), (sa, sb[:1])):
        for f32 in (False, True):
            c = assert_same_everywhere(lambda: native.gemm_f16(x, y, ta, tb, f32_out=f32))
            alone = np.stack([native.gemm_f16(x[i], y[0], ta, tb, f32_out=f32) for i in range(batch)])
            np.testing.assert_array_equal(bits(c), bits(alone))
    check_gemm(native.gemm_f16(a, b[:1], ta, tb), a, np.broadcast_to(b[:1], (batch,) + b.shape[1:]), ta, tb)
    # P.V's form: a shared A [m, k] (16+ rows) times one column per batch, computed as C^T
    v = rnd((1, 64, k), rng)
    p_rows = rnd((batch, 1, k) if tb else (batch, k, 1), rng)
    c = assert_same_everywhere(lambda: native.gemm_f16(v, p_rows, False, tb))
    alone = np.stack([native.gemm_f16(v[0], p_rows[i], False, tb) for i in range(batch)])
    np.testing.assert_array_equal(bits(c), bits(alone))


# A large row-major op(A) (>= 65,536 elements, a weight fed as a program input: shared layer programs) times
# one to four columns (decode's live columns) reads A in place: C^T = op(B)^T op(A)^T on the few-rows route,
# scattered into C; so does any A (16+ rows) times ONE column (decode's P.V: each head's V [head_dim, T] times
# one probability row). Bit for bit what a wider product (5+ columns: the panel route) gives, on every ISA,
# with specials, batches, both B layouts, fp32 output and a padded ldc.
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch,m,n,k", [(0, 1536, 1, 576), (0, 576, 3, 1536), (2, 300, 4, 256), (0, 16, 2, 4096),
                                         (0, 4100, 1, 17),
                                         # P.V of one decode column: small A, one column
                                         (9, 64, 1, 128), (3, 64, 1, 1000), (0, 16, 1, 40), (2, 17, 1, 1)])
def test_gemm_in_place_a_route_equals_the_panel_route(tb, batch, m, n, k):
    rng = np.random.default_rng(m + n + k + batch)
    a, b = make_operands(rng, batch, m, n, k, False, tb)
    assert_equals_wider_product(rng, a, b, False, tb, n, k, 5)
    if not batch:
        c = native.gemm_f16(a, b, False, tb, ldc_pad=3)          # C's row stride past its N columns
        assert (c[:, n:].view(np.uint16) == 0xFFFF).all()
        check_gemm(c[:, :n], a, b, False, tb)


@pytest.mark.parametrize("tb", [False, True])
def test_gemm_rows_route_reads_strided_operands(tb):
    # B with a row stride past its row (a view into a wider cache): the rows kernels read it in place, the
    # transposed one in 16 x 16 blocks up to the last row and the last k, and prefetch rows beyond the
    # operand (harmless: the test's memory checkers and the comparison below see no difference)
    rng = np.random.default_rng(11 + tb)
    for batch, m, n, k in ((12, 1, 40, 21), (3, 2, 128, 64), (0, 4, 33, 17)):
        a, _ = make_operands(rng, batch, m, n, k, False, tb)
        wide = rnd(((batch,) if batch else ()) + ((n, k + 13) if tb else (k, n + 13)), rng)
        b = wide[..., :k] if tb else wide[..., :n]
        c = assert_same_everywhere(lambda: native.gemm_f16(a, b, False, tb))
        tall = np.concatenate([a, rnd(a.shape[:-2] + (5, k), rng)], axis=-2)
        np.testing.assert_array_equal(bits(c), bits(native.gemm_f16(tall, np.ascontiguousarray(b), False, tb)[..., :m, :]))


# Tiny products (M * N * K <= 64: RoPE's 2x2 pair swap over [2, S], hundreds per op) are computed element by
# element: the same fma chain from +0 and one rounding as the blocked route, which a wider product takes.
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch,m,n,k", [(384, 2, 16, 2), (384, 2, 1, 2), (0, 1, 1, 1), (3, 4, 4, 4), (0, 8, 8, 1),
                                         (5, 1, 64, 1), (2, 3, 7, 3), (0, 2, 2, 16)])
def test_gemm_tiny_route_equals_blocked_route(ta, tb, batch, m, n, k):
    rng = np.random.default_rng(batch + m * 7 + n * 3 + k)
    a, b = make_operands(rng, batch, m, n, k, ta, tb)
    sa, sb = with_specials(a, b)
    for x, y in ((a, b), (sa, sb)):
        c = assert_same_everywhere(lambda: native.gemm_f16(x, y, ta, tb))
        wy = np.stack([widened(t, tb, extra=64) for t in y]) if batch else widened(y, tb, extra=64)
        np.testing.assert_array_equal(bits(c), bits(native.gemm_f16(x, wy, ta, tb)[..., :n]))
        c32 = assert_same_everywhere(lambda: native.gemm_f16(x, y, ta, tb, f32_out=True))
        np.testing.assert_array_equal(bits(c32), bits(native.gemm_f16(x, wy, ta, tb, f32_out=True)[..., :n]))
    check_gemm(native.gemm_f16(a, b, ta, tb), a, b, ta, tb)


# Many one-column products sharing A whose columns of B and C lie back to back (RoPE's 2x2 pair swap on decode's
# compact live column) are computed as one product: bit for bit each product alone (a second column makes it
# take the per-product route), with specials, fp16 and fp32 out, every ISA and thread count.
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch,m,k", [(288, 2, 2), (96, 2, 2), (16, 4, 3), (40, 1, 8), (20, 8, 1)])
def test_gemm_shared_a_columns_equal_each_product_alone(ta, tb, batch, m, k):
    rng = np.random.default_rng(batch + m * 7 + k)
    a = rnd((k, m) if ta else (m, k), rng)
    b = rnd((batch, 1, k) if tb else (batch, k, 1), rng)
    sa, sb = with_specials(a, b)
    for x, y in ((a, b), (sa, sb)):
        wide = np.concatenate([y, rnd((batch, 1, k) if tb else (batch, k, 1), rng)], axis=1 if tb else 2)
        for f32 in (False, True):
            c = assert_same_everywhere(lambda: native.gemm_f16(x, y, ta, tb, f32_out=f32))
            np.testing.assert_array_equal(bits(c), bits(native.gemm_f16(x, wide, ta, tb, f32_out=f32)[..., :1]))
    check_gemm(native.gemm_f16(a, b, ta, tb), a, b, ta, tb)


def test_gemm_panel_batches_shared_operand_and_specials():
    rng = np.random.default_rng(11)
    # the CPU classifier's layout: 16-row panels stored k-major, one hidden-state matrix for all batches
    w = rnd((37 * 16, 96), rng)
    panels = np.ascontiguousarray(w.reshape(37, 16, 96).transpose(0, 2, 1))
    h = rnd((1, 96, 3), rng)
    z = assert_same_everywhere(lambda: native.gemm_f16(panels, h, trans_a=True, f32_out=True))
    np.testing.assert_array_equal(bits(z.reshape(-1, 3)), bits(native.gemm_f16(w, h[0], f32_out=True)))
    a, b = rnd((40, 20), rng), rnd((20, 8), rng)
    a[3, 4], a[7, 0], b[2, 5] = np.inf, np.nan, -np.inf
    c = assert_same_everywhere(lambda: native.gemm_f16(a, b))
    np.testing.assert_array_equal(bits(c), bits(native.gemm_f16(a, widened(b, False))[:, :8]))


@pytest.mark.parametrize("n", [1, 3, 20])
def test_gemm_panels_equals_gemm_on_the_unpacked_matrix(n):
    # the engine's CPU classifier: caller-owned panels [P, K, 16] through the packed route (several
    # panels per tile for few columns), bit-equal to the plain product, padding rows zero
    rng = np.random.default_rng(n)
    V, d = 37 * 16 - 5, 96
    w = rnd((V, d), rng)
    wp = np.zeros((37 * 16, d), np.float16)
    wp[:V] = w
    panels = np.ascontiguousarray(wp.reshape(37, 16, d).transpose(0, 2, 1))
    h = rnd((d, n), rng)
    for f32 in (False, True):
        z = assert_same_everywhere(lambda: native.gemm_panels_f16(panels, h, f32_out=f32))
        assert z.shape == (37 * 16, n)
        np.testing.assert_array_equal(bits(z[:V]), bits(native.gemm_f16(w, h, f32_out=f32)))
        assert not z[V:].any()
        # trans_out writes C^T directly (the classifier's [columns, V] logits): the same bits, transposed
        zt = assert_same_everywhere(lambda: native.gemm_panels_f16(panels, h, f32_out=f32, trans_out=True))
        assert zt.shape == (n, 37 * 16) and zt.flags.c_contiguous
        np.testing.assert_array_equal(bits(zt), bits(np.ascontiguousarray(z.T)))
    with pytest.raises(ValueError, match="panels must be"):
        native.gemm_panels_f16(np.zeros((4, d, 8), np.float16), h)
    with pytest.raises(ValueError, match="inner dimensions"):
        native.gemm_panels_f16(panels, rnd((d + 1, n), rng))


def test_gemm_leading_dimensions_and_output_padding():
    rng = np.random.default_rng(6)
    big_a, big_b = rnd((50, 90), rng), rnd((80, 70), rng)
    a, b = big_a[:, 3:43], big_b[:40, 5:50]  # row strides 90 and 70 (lda, ldb > cols)
    assert not a.flags.c_contiguous
    c = native.gemm_f16(a, b, ldc_pad=7)
    assert c.shape == (50, 52)
    check_gemm(c[:, :45], a, b, False, False)
    assert (c[:, 45:].view(np.uint16) == 0xFFFF).all()  # padding untouched
    ct = native.gemm_f16(big_a[:40, 3:53], big_b[2:47, 10:50], True, True)  # transposed + padded
    check_gemm(ct, big_a[:40, 3:53], big_b[2:47, 10:50], True, True)
    b3 = rnd((4, 30, 60), rng)[:, :, 10:35]  # 3-D with padded rows
    a3 = rnd((4, 20, 30), rng)
    check_gemm(native.gemm_f16(a3, b3), a3, b3, False, False)


def test_gemm_large_multithreaded_and_k_blocking():
    rng = np.random.default_rng(7)
    a, b = rnd((300, 700), rng), rnd((700, 290), rng)
    c = assert_same_everywhere(lambda: native.gemm_f16(a, b))
    check_gemm(c, a, b, False, False)


def test_gemm_overflow_nan_and_zero_k():
    a = np.full((4, 8), 200.0, F16)
    b = np.full((8, 3), 100.0, F16)
    assert np.isposinf(native.gemm_f16(a, b)).all()  # 160000 > 65504 -> inf
    b[0, 1] = np.nan
    c = native.gemm_f16(a, b)
    assert np.isnan(c[:, 1]).all() and np.isposinf(c[:, 0]).all()
    z = native.gemm_f16(np.zeros((3, 0), F16), np.zeros((0, 4), F16))
    assert z.shape == (3, 4) and (z == 0).all()
    with pytest.raises(ValueError):
        native.gemm_f16(np.zeros((3, 4), F16), np.zeros((5, 4), F16))


# ---- element-wise -----------------------------------------------------------------------------

BIN = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
       "maximum": np.maximum, "minimum": np.minimum}


def binary_ref(op, a, b):
    with np.errstate(all="ignore"):
        return BIN[op](a.astype(np.float64), b.astype(np.float64)).astype(F16)


def check_binary(op, y, a, b):
    ref = binary_ref(op, a, b)
    assert y.shape == ref.shape
    if op != "pow":  # exact
        np.testing.assert_array_equal(bits(y), bits(ref))
        return
    # pow is libm powf (~1 fp32 ulp) then one rounding: faithful
    with np.errstate(all="ignore"):
        exact = np.power(a.astype(np.float64), b.astype(np.float64))
    fin = np.isfinite(ref)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(y[~fin & ~np.isnan(ref)], ref[~fin & ~np.isnan(ref)])
    assert np.all(np.abs(y[fin].astype(np.float64) - exact[fin]) < ulp16(exact[fin]))


BROADCASTS = [((37, 53), (37, 53)), ((37, 53), ()), ((), (37, 53)), ((37, 53), (1, 53)), ((37, 53), (37, 1)),
              ((37, 1), (1, 53)), ((2, 3, 1, 5, 4), (3, 7, 1, 4)), ((70_000,), (70_000,)), ((3, 70_000), (1,)),
              ((300, 400), (400,)),
              # short rows (batched into blocks): a bias over decode columns, a [1, S] statistic, the
              # ones-broadcast that widens outputs (pairs), more rows than one block, a rank-3 walk
              ((768, 16), (768, 1)), ((768, 16), (1, 16)), ((6000, 1), (1, 2)), ((1, 2), (6000, 1)),
              ((5000, 3), (5000, 1)), ((7, 300, 5), (7, 1, 5)), ((4, 9, 2), (9, 1))]


@pytest.mark.parametrize("op", list(BIN))
@pytest.mark.parametrize("sa,sb", BROADCASTS)
def test_binary_broadcasting(op, sa, sb):
    rng = np.random.default_rng(8)
    a, b = rnd(sa, rng, 3), rnd(sb, rng, 3)
    if op == "pow":
        a = np.abs(a)
    y = assert_same_everywhere(lambda: native.testing.binary(op, a, b))
    check_binary(op, y, a, b)


@pytest.mark.parametrize("op", ["add", "mul", "div", "maximum"])
def test_binary_strided_views_and_specials(op):
    rng = np.random.default_rng(9)
    base = rnd((40, 60), rng)
    a, b = base[::2, 1::3], base[5:25, ::-3]  # non-contiguous, negative stride
    np.testing.assert_array_equal(bits(native.testing.binary(op, a, b)), bits(binary_ref(op, a, b)))
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 65504, -65504, 6e-8, 1.0, -2.0], F16)
    A, B = np.meshgrid(sp, sp)
    y = assert_same_everywhere(lambda: native.testing.binary(op, A.copy(), B.copy()))
    np.testing.assert_array_equal(bits(y), bits(binary_ref(op, A, B)))


def unary_ref(op, x, param=0.0):
    xd = x.astype(np.float64)
    erf = np.vectorize(math.erf)
    with np.errstate(all="ignore"):
        v = (x.astype(np.float32) + np.float32(param)).astype(np.float64)  # param is added in fp32
        return {
            "exp": lambda: np.exp(xd),
            "log": lambda: np.log(v),
            "sqrt": lambda: np.sqrt(v),
            "rsqrt": lambda: 1 / np.sqrt(v),
            "tanh": lambda: np.tanh(xd),
            "sigmoid": lambda: 1 / (1 + np.exp(-xd)),
            "relu": lambda: np.where(xd > 0, xd, np.where(np.isnan(xd), xd, 0.0)),
            "neg": lambda: -xd,
            "abs": lambda: np.abs(xd),
            "square": lambda: xd * xd,
            "reciprocal": lambda: 1 / xd,
            "silu": lambda: np.where(xd == -np.inf, 0.0, xd / (1 + np.exp(-xd))),
            "gelu_tanh": lambda: np.where(xd == -np.inf, 0.0,
                                          0.5 * xd * (1 + np.tanh(np.sqrt(2 / np.pi) * (xd + 0.044715 * xd**3)))),
            "gelu_exact": lambda: np.where(xd == -np.inf, 0.0, 0.5 * xd * (1 + erf(xd / np.sqrt(2)))),
            "identity": lambda: xd,
        }[op]()


UNARY = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "neg", "abs", "square", "reciprocal",
         "silu", "gelu_tanh", "gelu_exact", "identity"]
EXACT_UNARY = {"sqrt", "relu", "neg", "abs", "square", "reciprocal", "identity"}


@pytest.mark.parametrize("op", UNARY)
def test_unary_exhaustive(op):
    """All 65536 fp16 inputs (incl. inf/nan/subnormals); faithful (< 1 ulp) everywhere, mostly exact."""
    param = 1e-3 if op in ("log", "rsqrt") else 0.0
    y = assert_same_everywhere(lambda: native.testing.unary(op, ALL_F16, param))
    ref = unary_ref(op, ALL_F16, param)
    with np.errstate(all="ignore"):
        ref16 = ref.astype(F16)
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref16), err_msg="NaN positions")
    inf = np.isinf(ref16)
    np.testing.assert_array_equal(y[inf], ref16[inf], err_msg="overflow / infinities")
    fin = np.isfinite(ref16)
    yd = y[fin].astype(np.float64)
    if op in EXACT_UNARY:
        np.testing.assert_array_equal(bits(y[fin]), bits(ref16[fin]))
        return
    err = np.abs(yd - ref[fin]) / ulp16(ref[fin])
    assert err.max() < 1.0, f"max error {err.max():.3f} ulp at x={ALL_F16[fin][err.argmax()]}"
    not_cr = np.count_nonzero(yd != ref16[fin].astype(np.float64))
    assert not_cr <= 0.001 * fin.sum(), f"{not_cr} inputs not correctly rounded"


def test_unary_signs_and_inplace():
    x = np.array([0.0, -0.0, -1.0, np.nan, -np.inf, np.inf], F16)
    assert list(native.testing.unary("relu", x).view(np.uint16)[:3]) == [0, 0, 0]  # -0 and negatives -> +0
    assert np.isnan(native.testing.unary("relu", x)[3])
    assert native.testing.unary("neg", x).view(np.uint16)[0] == 0x8000
    for op in ("silu", "gelu_tanh", "gelu_exact"):
        y = native.testing.unary(op, x)
        assert y[4] == 0 and y[5] == np.inf, op
    rng = np.random.default_rng(10)
    for op in ("exp", "neg", "tanh", "identity"):
        v = rnd((100_003,), rng)
        want = native.testing.unary(op, v)
        native.testing.unary(op, v, inplace=True)
        np.testing.assert_array_equal(bits(v), bits(want))


def test_clip_and_scale_bias():
    rng = np.random.default_rng(11)
    x = np.concatenate([rnd((100_001,), rng, 4), np.array([np.nan, np.inf, -np.inf], F16)])
    y = assert_same_everywhere(lambda: native.testing.clip(x, -1.5, 2.25))
    np.testing.assert_array_equal(bits(y), bits(np.clip(x.astype(np.float64), -1.5, 2.25).astype(F16)))
    assert np.isnan(y[-3])
    s, b = np.float32(0.3), np.float32(-1.7)
    y = assert_same_everywhere(lambda: native.testing.scale_bias(x, float(s), float(b)))
    # fma: exact x*s+b (fits float64 for these magnitudes), rounded to fp32 once, then to fp16
    with np.errstate(all="ignore"):
        ref = (x.astype(np.float64) * np.float64(s) + np.float64(b)).astype(np.float32).astype(F16)
    np.testing.assert_array_equal(bits(y), bits(ref))


# ---- reductions and softmax -------------------------------------------------------------------

RED = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
       "sum_square": lambda v, axis: np.sum(v * v, axis=axis)}


@pytest.mark.parametrize("op", list(RED))
@pytest.mark.parametrize("shape,axis", [((5, 37, 3), 1), ((5, 37, 3), 2), ((5, 37, 3), 0), ((4, 1000), 1),
                                        ((3, 1, 7), 1), ((1, 17), 1), ((600, 130), 0), ((130, 600), 1),
                                        ((2, 3000, 70), 1)])
def test_reduce(op, shape, axis):
    rng = np.random.default_rng(12)
    x = (rng.uniform(0.9, 1.1, shape) if op == "prod" else rng.standard_normal(shape)).astype(F16)
    y = assert_same_everywhere(lambda: native.testing.reduce(op, x, axis))
    xd = x.astype(np.float64)
    ref = RED[op](xd, axis=axis)
    if op in ("max", "min"):
        np.testing.assert_array_equal(y, ref.astype(F16))
        return
    if op == "prod":
        mag = np.abs(ref) * shape[axis]
    elif op == "sum_square":
        mag = np.sum(xd * xd, axis=axis)
    else:
        mag = np.sum(np.abs(xd), axis=axis) / (shape[axis] if op == "mean" else 1)
    err = np.abs(y.astype(np.float64) - ref)
    assert np.all(err <= 2.0**-10 * mag + 2.0**-24), err.max()


def test_reduce_specials():
    x = np.array([[1, np.nan, 3], [1, 2, np.inf], [-np.inf, 0, 5]], F16)
    for op in ("max", "min", "sum"):
        y = native.testing.reduce(op, x, 1)
        np.testing.assert_array_equal(bits(y), bits(RED[op](x.astype(np.float64), axis=1).astype(F16)), err_msg=op)
        yc = native.testing.reduce(op, x.T.copy(), 0)  # same thing along a strided axis
        np.testing.assert_array_equal(bits(yc), bits(y), err_msg=op)
    big = np.full((2, 40), 60000, F16)
    assert np.isposinf(native.testing.reduce("sum", big, 1)).all()  # fp32 sum exceeds fp16 range
    assert (native.testing.reduce("mean", big, 1) == 60000).all()  # ... but the mean does not


def softmax_ref(x, axis):
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        e = np.exp(xd - xd.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape,axis", [((7, 33), 1), ((3, 256, 256), 2), ((4, 50, 9), 1), ((60, 5), 0),
                                        ((1, 32000), 1), ((2, 3, 1), 2)])
def test_softmax(shape, axis):
    rng = np.random.default_rng(13)
    x = rnd(shape, rng, 4)
    y = assert_same_everywhere(lambda: native.testing.softmax(x, axis))
    ref = softmax_ref(x, axis)
    err = np.abs(y.astype(np.float64) - ref)
    assert np.all(err <= 2.0**-10 * ref + 2.0**-24), err.max()


def test_softmax_infinities():
    x = np.array([[-np.inf, -np.inf, -np.inf], [0, -np.inf, 0], [1, 2, np.nan], [65504, -65504, 0]], F16)
    for axis, xx in ((1, x), (0, x.T.copy())):
        y = native.testing.softmax(xx, axis)
        y = y if axis == 1 else y.T
        assert np.isnan(y[0]).all()  # all -inf: NaN like IEEE
        np.testing.assert_array_equal(y[1], np.array([0.5, 0, 0.5], F16))
        assert np.isnan(y[2]).all()
        np.testing.assert_array_equal(y[3], np.array([1, 0, 0], F16))


# ---- layout -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.uint8, F16, np.float32, np.float64])
@pytest.mark.parametrize("shape,perm", [((5,), (0,)), ((300, 517), (1, 0)), ((2, 3, 4), (2, 0, 1)),
                                        ((4, 1, 6, 5), (3, 1, 0, 2)), ((2, 3, 4, 5, 6), (4, 2, 0, 3, 1)),
                                        ((64, 12, 64), (1, 0, 2)), ((8, 40, 33), (0, 2, 1))])
def test_transpose(dtype, shape, perm):
    rng = np.random.default_rng(14)
    x = rng.integers(0, 250, size=shape).astype(dtype)
    y = assert_same_everywhere(lambda: native.transpose(x, list(perm))) if dtype == F16 else \
        native.transpose(x, list(perm))
    np.testing.assert_array_equal(y, np.transpose(x, perm))


def test_strided_copy():
    x = np.arange(2 * 30 * 40, dtype=np.float32).reshape(2, 30, 40)
    cases = [
        (0, [1200, 40, 1], [2, 30, 40], lambda v: v),                     # identity
        (45, [1200, 80, 3], [2, 10, 12], lambda v: v[:, 1::2, 5::3][:, :10, :12]),  # slices
        (0, [1200, 0, 1], [2, 7, 40], lambda v: np.broadcast_to(v[:, :1, :], (2, 7, 40))),  # broadcast
        (39, [1200, 40, -1], [2, 30, 40], lambda v: v[:, :, ::-1]),       # reversed
        (0, [1, 1200, 40], [40, 2, 30], lambda v: np.transpose(v, (2, 0, 1))),
    ]
    for off, st, sh, ref in cases:
        np.testing.assert_array_equal(native.testing.strided_copy(x, off, st, sh), ref(x))
    with pytest.raises(IndexError):
        native.testing.strided_copy(x, 0, [1200, 40, 1], [3, 30, 40])


# gemm_f32 (the trainer's CPU weight gradients): fp32 operands on the same blocked route and microkernels.
# With fp16-representable operands its result equals gemm_f16's fp32 output bit for bit (widening is exact,
# so each element is the same in-order fma chain over k), on every ISA and thread count; transposed views
# (numpy's .T) are read in place; K past one k block (384) keeps partial sums between blocks, a K past two chunks
# of packed B (kPackedBBytes) between chunks, in C.
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (3, 70, 5), (40, 33, 500), (130, 257, 256), (12, 32, 800),
                                   # row tiles resized to split evenly over 2 threads (3 -> 4, 6 -> 6 of 132)
                                   (300, 64, 500), (768, 40, 100),
                                   # a long K in chunks, each continuing the partial sums in C (the classifier's
                                   # gradient products: K = the vocabulary), edge tiles on both sides
                                   (20, 770, 2500), (9, 100, 24000)])
def test_gemm_f32_is_the_f16_gemms_fma_chain(ta, tb, m, n, k):
    rng = np.random.default_rng(m + 3 * n + 7 * k)
    a16, b16 = make_operands(rng, 0, m, n, k, ta, tb)
    a, b = a16.astype(np.float32), b16.astype(np.float32)
    av, bv = (a.T if ta else a), (b.T if tb else b)

    def run():
        out = np.full((m, n), np.nan, np.float32)
        native.gemm_f32(av, bv, out)
        return out
    c = assert_same_everywhere(run)
    np.testing.assert_array_equal(bits(c), bits(native.gemm_f16(a16, b16, ta, tb, f32_out=True)))


def test_gemm_f32_writes_a_strided_out_and_refuses_bad_layouts():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((20, 30), dtype=np.float32), rng.standard_normal((30, 10), dtype=np.float32)
    big = np.zeros((20, 16), np.float32)
    native.gemm_f32(a, b, big[:, 3:13])                       # rows of out with a leading dimension of 16
    np.testing.assert_allclose(big[:, 3:13], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert (big[:, :3] == 0).all() and (big[:, 13:] == 0).all()
    with pytest.raises(ValueError, match="inner dimensions"):
        native.gemm_f32(a, a, np.zeros((20, 30), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        native.gemm_f32(a, b, np.zeros((20, 11), np.float32))
    with pytest.raises(ValueError, match="contiguous rows or columns"):
        native.gemm_f32(np.zeros((20, 60), np.float32)[:, ::2], b, np.zeros((20, 10), np.float32))
