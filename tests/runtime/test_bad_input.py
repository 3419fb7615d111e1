"""Bad caller input gets typed exceptions with precise messages, never a crash."""

import numpy as np
import pytest

import orion
from runtime_programs import add_program, linear_program, rand, weight_blob

SHAPE = (1, 256, 1, 128)


@pytest.fixture(scope="module")
def prog():
    return orion.compile_mil(add_program())


def test_unknown_input_lists_valid_names(prog):
    with pytest.raises(orion.InputError, match="unknown input 'c'.*a, b"):
        prog(a=rand(SHAPE), b=rand(SHAPE), c=rand(SHAPE))


def test_missing_input(prog):
    with pytest.raises(orion.InputError, match="missing input 'b'"):
        prog(a=rand(SHAPE))


def test_wrong_shape(prog):
    with pytest.raises(orion.InputError, match=r"shape \[1, 256, 1, 64\].*\[1, 256, 1, 128\]"):
        prog(a=rand((1, 256, 1, 64)), b=rand(SHAPE))


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_])
def test_wrong_dtype(prog, dtype):
    with pytest.raises(orion.InputError, match="dtype"):
        prog(a=np.zeros(SHAPE, dtype), b=rand(SHAPE))


def test_not_an_array(prog):
    with pytest.raises(orion.InputError, match="numpy array"):
        prog(a=[1, 2, 3], b=rand(SHAPE))


def test_non_contiguous(prog):
    big = rand((1, 256, 1, 256))
    with pytest.raises(orion.InputError, match="contiguous"):
        prog(a=big[..., ::2], b=rand(SHAPE))


def test_float32_is_converted_for_fp16_inputs(prog):
    a = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    z = prog(a=a, b=np.zeros(SHAPE, np.float16))["z"]
    np.testing.assert_array_equal(z, a.astype(np.float16))


def test_mil_must_be_text():
    with pytest.raises(orion.InputError):
        orion.compile_mil(12345)


def test_weights_must_be_a_dict_of_bytes():
    with pytest.raises(orion.InputError):
        orion.compile_mil(linear_program(), {"@model_path/weights/w.bin": 3.5})
    with pytest.raises(orion.InputError):
        orion.compile_mil(linear_program(), {1: b"x"})


def test_missing_weight_file_is_a_compile_error():
    with pytest.raises(orion.CompileError, match="w.bin"):
        orion.compile_mil(linear_program(), {})


def test_truncated_blob_is_a_compile_error_not_a_crash():
    blob = weight_blob(rand((128, 64, 1, 1)))
    for cut in (10, 64, 100, 128, len(blob) - 1):
        with pytest.raises(orion.OrionError):
            orion.compile_mil(linear_program(), {"@model_path/weights/w.bin": blob[:cut]})


def test_bad_profile_values():
    with pytest.raises(orion.InputError):
        orion.sim.Profile(chip="m9")
    with pytest.raises(orion.InputError):
        orion.sim.Profile(strictness="lenient")
