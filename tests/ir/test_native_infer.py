"""Shape inference lives once, in the simulator's registry (``sim/ops/*.cpp``, ``_native.sim_infer``); the
IR's builders ask it. Every schema op is fed generated valid operands — the native type must equal the
shape of the op's float64 numpy reference run on such arrays (an independent derivation) and the type the
graph builder gives the node — and invalid ones, which the native inference and the builder both refuse
with a message naming the problem."""

from __future__ import annotations

import numpy as np
import pytest
from orion import _native
from orion.errors import CompileError, InputError
from orion.ir import OPS, Graph, ops
from orion.ir.graph import NP_DTYPES, GraphError
from orion.ir.ops import evaluate_node, make
from orion.quant import PackedInts

F, C = "fp16", "const"


def packed(shape, bits, signed):
    lo = -(1 << (bits - 1)) if signed else 0
    return PackedInts.pack(np.full(shape, lo, np.int8 if signed else np.uint8), bits, signed)


CONV = {"dilations": (1, 1), "groups": 1, "pad": (0, 0, 0, 0), "pad_type": "valid", "strides": (1, 1)}
BIN = {"valid": [({"x": (F, (2, 1, 4)), "y": (F, (3, 1))}, {}),
                 ({"x": (F, (2, 3)), "y": (F, ())}, {}),
                 ({"x": ("fp32", (4,)), "y": ("fp32", (1,))}, {})],
       "invalid": [({"x": (F, (2,)), "y": (F, (3,))}, {}, "broadcast"),
                   ({"x": (F, (2,)), "y": ("fp32", (2,))}, {}, "dtype"),
                   ({"x": ("int32", (2,)), "y": ("int32", (2,))}, {}, "fp16 or fp32")]}
UNARY = {"valid": [({"x": (F, (2, 3))}, {}), ({"x": ("fp32", (5,))}, {})],
         "invalid": [({"x": ("int32", (2,))}, {}, "fp16 or fp32")]}
RED = {"valid": [({"x": (F, (2, 3, 4))}, {"axes": (1,), "keep_dims": True}),
                 ({"x": (F, (2, 3, 4))}, {"axes": (0, 2), "keep_dims": False}),
                 ({"x": (F, (2, 3, 4))}, {"axes": (-1,), "keep_dims": True})],
       "invalid": [({"x": (F, (2, 3))}, {"axes": (2,), "keep_dims": True}, "out of range"),
                   ({"x": (F, (2, 3))}, {"axes": (1, 1), "keep_dims": True}, "duplicate"),
                   ({"x": ("int32", (2, 3))}, {"axes": (1,), "keep_dims": True}, "fp16 or fp32")]}

# op -> valid cases (operands, consts[, result dtype when not the first operand's]) and invalid cases
# (operands, consts, a phrase of the native message). An operand: (dtype, shape[, "const"]); a tuple of
# them for a tuple parameter. constexpr ops take their tensors as attributes (arrays / PackedInts).
CASES = {
    **{op: BIN for op in ("add", "sub", "mul", "real_div", "pow", "maximum", "minimum")},
    **{op: UNARY for op in ("sqrt", "rsqrt", "exp", "tanh", "sigmoid", "relu", "silu", "gelu")},
    **{op: RED for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod")},
    "log": {"valid": [({"x": (F, (2, 3))}, {"epsilon": 0.0})],
            "invalid": [({"x": ("int32", (2,))}, {"epsilon": 0.0}, "fp16 or fp32")]},
    "clip": {"valid": [({"x": (F, (2, 3))}, {"alpha": -1.0, "beta": 1.0})],
             "invalid": [({"x": ("int32", (2,))}, {"alpha": 0.0, "beta": 1.0}, "fp16 or fp32"),
                         ({"x": (F, (2,))}, {"alpha": 2.0, "beta": 1.0}, "alpha")]},
    "softmax": {"valid": [({"x": (F, (2, 3, 4))}, {"axis": -1}), ({"x": (F, (2, 3, 4))}, {"axis": 1})],
                "invalid": [({"x": (F, (2, 3))}, {"axis": 2}, "out of range"),
                            ({"x": ("int32", (2, 3))}, {"axis": 0}, "fp16 or fp32")]},
    "layer_norm": {"valid": [({"x": (F, (2, 3, 4))}, {"axes": (1, 2), "epsilon": 1e-5}),
                             ({"x": (F, (2, 3, 4)), "gamma": (F, (4,)), "beta": (F, (4,))},
                              {"axes": (2,), "epsilon": 1e-5})],
                   "invalid": [({"x": (F, (2, 3, 4)), "gamma": (F, (3,))}, {"axes": (2,), "epsilon": 1e-5}, "gamma"),
                               ({"x": (F, (2, 3))}, {"axes": (), "epsilon": 1e-5}, "empty"),
                               ({"x": (F, (2, 3))}, {"axes": (2,), "epsilon": 1e-5}, "out of range")]},
    "reshape": {"valid": [({"x": (F, (2, 3, 4))}, {"shape": (6, 4)}), ({"x": ("int32", (6,))}, {"shape": (1, 2, 3)})],
                "invalid": [({"x": (F, (2, 3, 4))}, {"shape": (5, 5)}, "cannot reshape")]},
    "transpose": {"valid": [({"x": (F, (2, 3, 4))}, {"perm": (2, 0, 1)})],
                  "invalid": [({"x": (F, (2, 3, 4))}, {"perm": (0, 0, 1)}, "permutation"),
                              ({"x": (F, (2, 3))}, {"perm": (0, 1, 2)}, "entries")]},
    "cast": {"valid": [({"x": (F, (2, 3))}, {"dtype": "fp32"}, "fp32"), ({"x": (F, (2,))}, {"dtype": "int32"}, "int32")],
             "invalid": [({"x": (F, (2,))}, {"dtype": "fp64"}, "dtype must be")]},
    "slice_by_index": {"valid": [({"x": (F, (4, 6))}, {"begin": (0, 1), "end": (4, 6), "stride": (1, 2)}),
                                 ({"x": (F, (4, 6))}, {"begin": (1, 0), "end": (3, 6), "stride": (1, 1)})],
                       "invalid": [({"x": (F, (4, 6))}, {"begin": (0,), "end": (4,), "stride": (1,)}, "entries"),
                                   ({"x": (F, (4, 6))}, {"begin": (2, 0), "end": (2, 6), "stride": (1, 1)}, "empty")]},
    "slice_by_size": {"valid": [({"x": (F, (4, 6))}, {"begin": (1, 0), "size": (2, 6)})],
                      "invalid": [({"x": (F, (4, 6))}, {"begin": (3, 0), "size": (2, 6)}, "exceeds"),
                                  ({"x": (F, (4, 6))}, {"begin": (0,), "size": (2,)}, "entries")]},
    "concat": {"valid": [({"values": ((F, (2, 3)), (F, (2, 5)))}, {"axis": 1, "interleave": False}),
                         ({"values": ((F, (2, 3)),)}, {"axis": 0, "interleave": False})],
               "invalid": [({"values": ((F, (2, 3)), (F, (3, 5)))}, {"axis": 1, "interleave": False}, "differ"),
                           ({"values": ((F, (2, 3)), ("fp32", (2, 3)))}, {"axis": 1, "interleave": False}, "dtype"),
                           ({"values": ((F, (2, 3)),)}, {"axis": 2, "interleave": False}, "out of range")]},
    "split": {"valid": [({"x": (F, (2, 6))}, {"axis": 1, "num_splits": 1})],
              "invalid": [({"x": (F, (2, 6))}, {"axis": 1, "num_splits": 2}, "slice_by_size"),
                          ({"x": (F, (2, 6))}, {"axis": 2, "num_splits": 1}, "out of range")]},
    "identity": {"valid": [({"x": (F, (2, 3))}, {}), ({"x": ("int32", (4,))}, {})], "invalid": []},
    "gather": {"valid": [({"x": (F, (5, 4)), "indices": ("int32", (2, 3))}, {"axis": 0}),
                         ({"x": (F, (5, 4)), "indices": ("int32", (2,))}, {"axis": -1})],
               "invalid": [({"x": (F, (5, 4)), "indices": ("int32", (2,))}, {"axis": 2}, "out of range")]},
    "select": {"valid": [({"cond": ("bool", (2, 1)), "a": (F, (1, 3)), "b": (F, (2, 3))}, {}, F)],
               "invalid": [({"cond": ("bool", (4, 1)), "a": (F, (2, 3)), "b": (F, (2, 3))}, {}, "broadcast"),
                           ({"cond": ("bool", (2, 3)), "a": (F, (2, 3)), "b": ("fp32", (2, 3))}, {}, "dtype")]},
    "band_part": {"valid": [({"x": (F, (3, 4))}, {"lower": 1, "upper": -1})],
                  "invalid": [({"x": (F, (4,))}, {"lower": 0, "upper": 0}, "rank >= 2")]},
    "conv": {"valid": [({"x": (F, (1, 4, 5, 5)), "weight": (F, (6, 4, 3, 3), C)}, CONV),
                       ({"x": (F, (1, 4, 5, 5)), "weight": (F, (6, 4, 3, 3), C)},
                        {**CONV, "pad_type": "same", "strides": (2, 2)}),
                       ({"x": (F, (1, 4, 5, 5)), "weight": (F, (6, 2, 1, 1), C), "bias": (F, (6,), C)},
                        {**CONV, "groups": 2}),
                       ({"x": (F, (1, 4, 5, 5)), "weight": (F, (6, 4, 2, 2), C)},
                        {**CONV, "pad_type": "custom", "pad": (1, 0, 0, 1), "dilations": (2, 1)})],
             "invalid": [({"x": (F, (1, 4, 5, 5)), "weight": (F, (6, 3, 1, 1), C)}, CONV, "input channels"),
                         ({"x": (F, (1, 4, 5, 5)), "weight": (F, (6, 4, 7, 7), C)}, CONV, "does not fit"),
                         ({"x": (F, (1, 4, 5, 5)), "weight": (F, (6, 4, 1, 1), C), "bias": (F, (5,), C)}, CONV,
                          "bias")]},
    "matmul": {"valid": [({"x": (F, (2, 3, 4)), "y": (F, (4, 5))}, {"transpose_x": False, "transpose_y": False}),
                         ({"x": (F, (2, 4, 3)), "y": (F, (1, 5, 4))}, {"transpose_x": True, "transpose_y": True})],
               "invalid": [({"x": (F, (2, 3)), "y": (F, (4, 5))}, {"transpose_x": False, "transpose_y": False},
                            "inner dimensions"),
                           ({"x": (F, (2, 3, 4)), "y": (F, (3, 4, 5))}, {"transpose_x": False, "transpose_y": False},
                            "broadcast")]},
    "scaled_dot_product_attention": {
        "valid": [({"query": (F, (1, 2, 3, 4)), "key": (F, (1, 2, 5, 4)), "value": (F, (1, 2, 5, 6))}, {}),
                  ({"query": (F, (2, 3, 4)), "key": (F, (2, 5, 4)), "value": (F, (2, 5, 6)), "attn_mask": (F, (3, 5))},
                   {})],
        "invalid": [({"query": (F, (1, 3, 4)), "key": (F, (1, 5, 3)), "value": (F, (1, 5, 6))}, {}, "inner dimensions"),
                    ({"query": (F, (1, 3, 4)), "key": (F, (1, 5, 4)), "value": (F, (1, 4, 6))}, {}, "sequence length")]},
    "quantize": {"valid": [({"input": (F, (2, 3)), "scale": (F, (), C)}, {"output_dtype": "int8", "axis": None}, "int8"),
                           ({"input": (F, (2, 3)), "scale": (F, (3,), C), "zero_point": ("uint8", (3,), C)},
                            {"output_dtype": "uint8", "axis": 1}, "uint8")],
                 "invalid": [({"input": (F, (2, 3)), "scale": (F, (), C)}, {"output_dtype": "int4", "axis": None},
                              "output_dtype"),
                             ({"input": (F, (2, 3)), "scale": (F, (4,), C)}, {"output_dtype": "int8", "axis": 1},
                              "per-channel"),
                             ({"input": (F, (2, 3)), "scale": (F, (), C), "zero_point": ("uint8", (), C)},
                              {"output_dtype": "int8", "axis": None}, "zero_point")]},
    "dequantize": {"valid": [({"input": ("int8", (2, 3)), "scale": (F, (3,), C)}, {"axis": 1}, F),
                             ({"input": ("uint8", (4,)), "scale": (F, (), C), "zero_point": ("uint8", (), C)},
                              {"axis": None}, F)],
                   "invalid": [({"input": ("int8", (2, 3)), "scale": (F, (), C), "zero_point": ("uint8", (), C)},
                                {"axis": None}, "zero_point"),
                               ({"input": ("int8", (2, 3)), "scale": (F, (2,), C)}, {"axis": None}, "needs axis")]},
    "constexpr_affine_dequantize": {
        "valid": [({}, {"quantized_data": np.zeros((4, 3), np.int8), "scale": np.ones(4, np.float16),
                        "zero_point": np.zeros(4, np.int8), "axis": 0}, F),
                  ({}, {"quantized_data": np.zeros((4, 3), np.uint8), "scale": np.ones((), np.float16),
                        "zero_point": np.zeros((), np.uint8), "axis": 1}, F)],
        "invalid": [({}, {"quantized_data": np.zeros((4, 3), np.int8), "scale": np.ones(4, np.float16),
                          "zero_point": np.zeros(4, np.uint8), "axis": 0}, "zero_point"),
                    ({}, {"quantized_data": np.zeros((4, 3), np.int8), "scale": np.ones(3, np.float16),
                          "zero_point": np.zeros(3, np.int8), "axis": 0}, "rank-1 with 4 values")]},
    "constexpr_lut_to_dense": {
        "valid": [({}, {"indices": packed((8, 4), 4, False), "lut": np.zeros((2, 1, 16, 1), np.float16)}, F)],
        "invalid": [({}, {"indices": packed((8, 4), 4, False), "lut": np.zeros((3, 1, 16, 1), np.float16)}, "divide"),
                    ({}, {"indices": packed((8, 4), 4, False), "lut": np.zeros((2, 1, 8, 1), np.float16)}, "lut")]},
    "constexpr_blockwise_shift_scale": {
        "valid": [({}, {"data": packed((8, 4), 4, True), "scale": np.ones((2, 1), np.float16), "offset": None}, F),
                  ({}, {"data": packed((8, 4), 8, False), "scale": np.ones((2, 2), np.float16),
                        "offset": packed((2, 2), 8, False)}, F)],
        "invalid": [({}, {"data": packed((8, 4), 4, True), "scale": np.ones((3, 1), np.float16), "offset": None},
                     "divide"),
                    ({}, {"data": packed((8, 4), 4, True), "scale": np.ones((2, 1), np.float16),
                          "offset": packed((2, 1), 4, False)}, "offset")]},
}
# const: a source in the IR (Graph.const, no builder through make); its native rule is the value's type
NATIVE_ONLY = {"const"}


def _case_ids(kind):
    return [pytest.param(op, k, id=f"{op}-{k}") for op, c in sorted(CASES.items()) for k in range(len(c[kind]))]


def _mil_dtype(a) -> str:
    if isinstance(a, PackedInts):
        return a.dtype
    return {np.dtype(v): k for k, v in NP_DTYPES.items()}[np.asarray(a).dtype]


def _native_args(op, operands, consts):
    """The binding's arguments for a case: operand types, and the constexpr attributes' types."""
    flat = []
    for p, spec in operands.items():
        for s in (spec if isinstance(spec[0], tuple) else (spec,)):
            flat.append((p, s[0], s[1], len(s) > 2))
    scalars = {}
    for k, v in consts.items():
        if isinstance(v, (np.ndarray, PackedInts)):
            flat.append((k, _mil_dtype(v), tuple(v.shape), True))
        else:
            scalars[k] = v
    return flat, scalars


def _graph_case(operands):
    """Graph Values for a case's operands: fp16 runtime tensors as inputs, the rest as consts."""
    g = Graph("t")
    n = iter(range(100))

    def value(s):
        if s[0] == F and len(s) == 2:
            return g.input(f"i{next(n)}", s[1])
        return g.const(np.zeros(s[1], NP_DTYPES[s[0]]), dtype=s[0], keep_dtype=True)
    return g, {p: tuple(value(s) for s in spec) if isinstance(spec[0], tuple) else value(spec)
               for p, spec in operands.items()}


def _reference_shape(op, operands, consts):
    """The shape of the op's float64 numpy reference on arrays of the operand shapes."""
    def arr(s):
        return np.ones(s[1], np.bool_ if s[0] == "bool" else np.float64) if s[0] in ("bool",) or s[0][0] == "f" \
            else np.zeros(s[1], np.int64)
    arrays = {p: tuple(arr(s) for s in spec) if isinstance(spec[0], tuple) else arr(spec)
              for p, spec in operands.items()}
    return tuple(OPS[op].eval(arrays, dict(consts))[0].shape)


def test_every_schema_op_has_cases():
    names = {r["name"] for r in _native.sim_ops("m4", "strict")}
    assert names == set(CASES) | NATIVE_ONLY
    assert all(CASES[op]["valid"] for op in CASES)


@pytest.mark.parametrize("op,k", _case_ids("valid"))
def test_valid_operands_get_the_reference_type(op, k):
    operands, consts, *dtype = CASES[op]["valid"][k]
    first = next(iter(operands.values()), None)
    want_dtype = dtype[0] if dtype else (first[0] if isinstance(first[0], tuple) else first)[0]
    dt, shape = _native.sim_infer(op, *_native_args(op, operands, consts))
    assert (dt, shape) == (want_dtype, _reference_shape(op, operands, consts))
    g, inputs = _graph_case(operands)
    v = make(op, inputs, dict(consts), graph=g)
    assert (v.dtype, v.shape) == (dt, shape)


@pytest.mark.parametrize("op,k", _case_ids("invalid"))
def test_invalid_operands_are_refused_by_both(op, k):
    operands, consts, phrase = CASES[op]["invalid"][k]
    with pytest.raises(CompileError, match=f"InvalidMILProgram: {op}: .*{phrase}"):
        _native.sim_infer(op, *_native_args(op, operands, consts))
    g, inputs = _graph_case(operands)
    with pytest.raises(GraphError, match=op):
        make(op, inputs, dict(consts), graph=g)


def test_const_takes_the_type_of_its_value():
    assert _native.sim_infer("const", [("val", "int8", (3, 2), True)], {}) == ("int8", (3, 2))


# ---- the binding refuses malformed requests with typed errors ----------------------------------------------

@pytest.mark.parametrize("operands,consts,error,phrase", [
    ([("x", "fp16")], {}, InputError, "must be \\(param, dtype, shape"),
    ([("x", "fp99", (2,))], {}, InputError, "unknown dtype 'fp99'"),
    ([("x", "fp16", (2,)), ("x", "fp16", (2,))], {}, CompileError, "parameter 'x' given twice"),
    ([("x", "fp16", (2,))], {"axes": "1", "keep_dims": True}, CompileError, "axes' must be"),
    ([("x", "fp16", (2,))], {"axes": (2**40,), "keep_dims": True}, CompileError, "does not fit int32"),
    ([("x", "fp16", (2,))], {"axes": (0,), "keep_dims": object()}, CompileError, "keep_dims' must be a number"),
    ([("x", "fp16", (2,))], {"axes": (0,), "bogus": 1}, CompileError, "unknown parameter 'bogus'"),
    ([], {"axes": (0,)}, CompileError, "missing required parameter 'x'"),
])
def test_sim_infer_refuses_malformed_requests(operands, consts, error, phrase):
    with pytest.raises(error, match=phrase):
        _native.sim_infer("reduce_sum", operands, consts)


def test_sim_infer_refuses_an_unknown_op():
    with pytest.raises(CompileError, match="unknown op 'frobnicate'"):
        _native.sim_infer("frobnicate", [], {})


def test_constexpr_attribute_of_a_non_mil_dtype_is_a_graph_error():
    g = Graph("t")
    with pytest.raises(GraphError, match="float64, which is not a MIL tensor dtype"):
        make("constexpr_affine_dequantize", {}, {"quantized_data": np.zeros((4, 3), np.int8),
                                                  "scale": np.ones(4), "zero_point": np.zeros(4, np.int8),
                                                  "axis": 0}, graph=g)


# ---- what the IR keeps narrower than MIL, and references that follow MIL where the IR now lets it ----------

def test_builders_keep_the_ir_rules():
    g = Graph("t")
    x = g.input("x", (2, 6))
    with pytest.raises(GraphError, match="axis < 1"):          # MIL's 0 (copy an axis) is not an IR shape
        ops.reshape(x, (0, 6))
    with pytest.raises(GraphError, match="rank 4"):            # the IR's conv (and its reference) is 2-D
        ops.conv(g.input("y", (1, 4, 5)), np.zeros((6, 4, 1), np.float32))


def test_slice_by_size_reference_counts_a_negative_begin_from_the_end():
    x = np.arange(12.0).reshape(2, 6)
    g = Graph("t")
    v = ops.slice_by_size(g.input("x", (2, 6)), (0, -2), (2, 2))
    assert v.shape == (2, 2)
    np.testing.assert_array_equal(evaluate_node("slice_by_size", {"x": x}, v.node.attrs)[0], x[:, 4:6])


def test_matmul_reference_does_not_transpose_a_rank1_operand():
    g = Graph("t")
    v = ops.matmul(g.input("x", (4,)), g.input("y", (5, 4)), transpose_x=True, transpose_y=True)
    assert v.shape == (5,)
    x, y = np.arange(4.0), np.arange(20.0).reshape(5, 4)
    np.testing.assert_array_equal(evaluate_node("matmul", {"x": x, "y": y}, v.node.attrs)[0], y @ x)


@pytest.mark.parametrize("build", [
    lambda g: ops.constexpr_lut_to_dense(g, np.zeros((8, 4), np.uint8), np.zeros((2, 1, 256, 1), np.float16)),
    lambda g: ops.constexpr_blockwise_shift_scale(g, np.zeros((8, 4), np.int8), np.ones((2, 1), np.float16)),
])
def test_compressed_weight_builders_take_packed_ints_only(build):
    # a plain array has the right MIL type but not the packed payload the weight file needs
    with pytest.raises(GraphError, match="constexpr_"):
        build(Graph("t"))
