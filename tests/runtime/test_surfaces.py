"""Surfaces: zero-copy views, uniform allocation, and the hardware's eval failures (C02, C04, C12, C14)."""

import numpy as np
import pytest

import orion
from runtime_programs import add_program, rand, three_outputs

Surface = orion._native.Surface


def test_runtime_allocates_uniform_surfaces_of_at_least_49152_bytes():
    prog = orion.compile_mil(add_program(shape=(1, 16, 1, 16)))  # 512-byte tensors
    sizes = {prog.input_surface(n).alloc_size for n in ("a", "b")}
    assert sizes == {49152}
    assert prog.output_surface("z").alloc_size == 49152


def test_zero_copy_views_feed_eval_without_copies():
    prog = orion.compile_mil(add_program(shape=(1, 64, 1, 256)))
    va = prog.input_surface("a").view("fp16", [1, 64, 1, 256])
    vb = prog.input_surface("b").view("fp16", [1, 64, 1, 256])
    a, b = rand((1, 64, 1, 256), 1), rand((1, 64, 1, 256), 2)
    va[...] = a
    vb[...] = b
    prog.eval()
    z = prog.output_surface("z").view("fp16", [1, 64, 1, 256])
    np.testing.assert_array_equal(z, (a.astype(np.float64) + b).astype(np.float16))
    va[...] = 0  # the view aliases the surface: a second eval sees the change
    prog.eval()
    np.testing.assert_array_equal(z, b)


def test_view_outlives_released_program():
    prog = orion.compile_mil(add_program(shape=(1, 64, 1, 256)))
    v = prog.output_surface("z").view("fp16", [1, 64, 1, 256])
    prog.release()
    v[...] = 1  # memory still owned by the view's capsule
    assert float(v.sum()) == 64 * 256


def test_small_surface_fails_at_eval_with_status_0x1d():
    prog = orion.compile_mil(add_program(shape=(1, 16, 1, 16)))
    small_a, small_b = Surface(512), Surface(512)
    prog.bind_input("a", small_a)
    prog.bind_input("b", small_b)
    with pytest.raises(orion.EvalError) as e:
        prog.eval()
    assert e.value.status == 0x1D and e.value.constraint == "C04"
    assert "status=0x1d" in str(e.value)


def test_non_uniform_input_surfaces_fail_c12():
    prog = orion.compile_mil(add_program(shape=(1, 16, 1, 16)))
    prog.bind_input("a", Surface(49152))
    prog.bind_input("b", Surface(65536))
    with pytest.raises(orion.EvalError) as e:
        prog.eval()
    assert e.value.constraint == "C12"


def test_non_uniform_output_surfaces_fail_c02():
    prog = orion.compile_mil(three_outputs())
    prog.bind_output("q", Surface(65536 * 2))
    with pytest.raises(orion.EvalError) as e:
        prog(x=rand((1, 64, 1, 256)))
    assert e.value.constraint == "C02"


def test_oversized_surface_is_read_packed_from_byte_zero():
    """C14: a [1, C, 1, S] tensor is read from the first C*S elements, no row stride."""
    prog = orion.compile_mil(add_program(shape=(1, 64, 1, 256)))
    big_a, big_b = Surface(4 * 64 * 256), Surface(4 * 64 * 256)
    prog.bind_input("a", big_a)
    prog.bind_input("b", big_b)
    a = rand((1, 64, 1, 256), 3)
    # Written as if rows had a stride of 512 elements: the device still reads it packed.
    strided = big_a.view("fp16", [64, 512])
    strided[:, :256] = a[0, :, 0, :]
    prog.eval()
    z = prog.output_surface("z").view("fp16", [1, 64, 1, 256])
    np.testing.assert_array_equal(z.reshape(-1), big_a.view("fp16", [64 * 256]))


def test_request_with_wrong_surface_count_is_rejected():
    prog = orion.compile_mil(add_program(shape=(1, 64, 1, 256)))
    with pytest.raises(orion.EvalError):
        prog.eval_slots([prog.input_surface("a")], [prog.output_surface("z")])
    with pytest.raises(orion.EvalError) as e:
        prog.eval_slots([], [prog.output_surface("z")])
    assert e.value.constraint == "C42"


def test_surface_view_bounds_checked():
    s = Surface(49152)
    with pytest.raises(orion.InputError):
        s.view("fp32", [1, 49152])
    with pytest.raises(orion.InputError):
        s.view("float64")
    with pytest.raises(orion.InputError):
        Surface(0)


def test_views_of_more_than_eight_dimensions_see_the_surface():
    """The binding once had room for 8 dimensions and read uninitialised memory beyond them."""
    s = Surface(49152)
    flat = s.view("fp16", [24576])
    flat[:] = np.arange(24576) % 1000
    shape = [1] * 9 + [24, 1024]
    v = s.view("fp16", shape)
    assert list(v.shape) == shape
    np.testing.assert_array_equal(v.reshape(-1), flat)
    with pytest.raises(orion.InputError, match="at most 32"):
        s.view("uint8", [1] * 40)


def test_new_surface_is_the_programs_kind_and_refuses_bad_sizes():
    """``Program.new_surface(n)``: a zero-filled surface the program's backend binds (the sim's heap surface here,
    an IOSurface on the ANE); a size that is not a positive int is an InputError, never a nanobind TypeError."""
    prog = orion.compile_mil(add_program(shape=(1, 64, 1, 256)))
    size = prog.input_surface("a").alloc_size                   # C04/C12: the program's own input size
    s = prog.new_surface(size)
    assert s.alloc_size == size and not s.view("uint8").any()
    prog.bind_input("a", s)
    s.view("fp16", [1, 64, 1, 256])[...] = 1
    prog.input_surface("b").view("fp16", [1, 64, 1, 256])[...] = 2
    prog.eval()
    assert (prog.output_surface("z").view("fp16", [1, 64, 1, 256]) == 3).all()
    for bad in (0, -1, 1.5, True, "64", 1 << 50):
        with pytest.raises(orion.InputError):
            prog.new_surface(bad)


def test_a_big_surface_is_resident_only_where_written():
    """C12 sizes every input of a program like its largest - 32 MB each for a 1B model's shared layer program -
    while a mask or a token's activations fill a few KB of it: a simulator surface from SURFACE_MAPPED_BYTES on
    is mapped zero pages, so the padding never written costs no memory (Model.memory() counts resident bytes);
    a smaller one is zeroed heap memory, all resident. Both read as zeros until written."""
    from orion import _native
    big = _native.Surface(32 << 20)
    assert big.alloc_size == 32 << 20 and big.resident_bytes < (1 << 20)
    view = big.view("uint8")
    view[: 3 << 20] = 7                                               # the first 3 MB written
    assert (3 << 20) <= big.resident_bytes <= (4 << 20)               # (in 2 MB pages where the OS uses them)
    assert not view[3 << 20:].any()
    small = _native.Surface(_native.SURFACE_MAPPED_BYTES - 64)
    assert small.resident_bytes == small.alloc_size and not small.view("uint8").any()
