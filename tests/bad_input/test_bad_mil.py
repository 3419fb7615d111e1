"""Bad MIL programs and weight dictionaries given to ``orion.compile_mil``: each a typed error whose message
names the problem. The parser's own token-level cases live in tests/native/test_mil_parser.py and
the simulator's constraints in tests/sim/test_constraints.py; these are whole programs as a user writes them."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from orion.native.blob import write_blob_file
from orion.cli.demo import _HEADER

T = "tensor<fp16, [1, 64, 1, 64]>"
W = "tensor<fp16, [1, 64, 1, 1]>"
ADD = f'        {T} z = add(x = a, y = b)[name = string("z")];'
BLOB = write_blob_file([np.ones((1, 64, 1, 1), np.float16)])[0]


def prog(body=ADD, params=f"{T} a, {T} b", ret="z", opset="ios18"):
    return _HEADER + f"    func main<{opset}>({params}) {{\n{body}\n    }} -> ({ret});\n}}\n"


def weighted(path="@model_path/w.bin", off=64, ty=W):
    return prog(f'        {ty} w = const()[name = string("w"), val = {ty}(BLOBFILE(path = string("{path}"), '
                f'offset = uint64({off})))];\n        {T} z = mul(x = a, y = w)[name = string("z")];', params=f"{T} a")


SECOND_MAIN = f"    func main<ios18>({T} a, {T} b) {{\n{ADD}\n    }} -> (z);\n"
CASES = [
    ("empty text", "", {}, orion.MILSyntaxError, "expected 'program'"),
    ("not UTF-8", b"\xff" + prog().encode(), {}, orion.MILSyntaxError, "UTF-8"),
    ("NUL byte", prog().replace("add", "a\0dd"), {}, orion.MILSyntaxError, "control character"),
    ("text after the program", prog() + "xyz", {}, orion.MILSyntaxError, "end of input"),
    ("two functions named main", prog().replace("    } -> (z);\n}\n", "    } -> (z);\n" + SECOND_MAIN + "}\n"), {},
     orion.MILSyntaxError, "second function named 'main'"),
    ("no function main", prog().replace("func main", "func other"), {}, orion.CompileError, "no function 'main'"),
    ("unknown op", prog(ADD.replace("add(", "frobnicate(")), {}, orion.CompileError, "unknown op 'frobnicate'"),
    ("undefined operand", prog(ADD.replace("y = b", "y = c")), {}, orion.CompileError, "'c' is not defined"),
    ("undefined return value", prog(ret="q"), {}, orion.CompileError, "undefined return value q"),
    ("declared type differs", prog(ADD.replace(f"{T} z", "tensor<fp16, [1, 64, 1, 32]> z")), {}, orion.CompileError,
     "declared type"),
    ("unknown parameter", prog(ADD.replace("y = b", "q = b")), {}, orion.CompileError, "unknown parameter 'q'"),
    ("missing parameter", prog(ADD.replace(", y = b", "")), {}, orion.CompileError, "missing required parameter 'y'"),
    ("string operand", prog('        string s = const()[name = string("s"), val = string("x")];\n' +
                            ADD.replace("y = b", "y = s")), {}, orion.CompileError, "must be fp16 or fp32"),
    ("dimension too large", prog(params="tensor<fp16, [1, 1099511627776, 1, 1]> a, tensor<fp16, [1, 1, 1, 1]> b"),
     {}, orion.MILSyntaxError, "too large"),
    ("fp64 input", prog(params=f"tensor<fp64, [1, 64, 1, 64]> a, {T} b"), {}, orion.MILSyntaxError, "fp64"),
    ("opset ios99", prog(opset="ios99"), {}, orion.MILSyntaxError, "ios99"),
    ("weight file not given", weighted(), {}, orion.CompileError, "not in the weight dictionary"),
    ("weight offset past the file", weighted(off=4096), {"@model_path/w.bin": BLOB}, orion.CompileError,
     "offset 4096"),
    ("weight offset not a record", weighted(off=65), {"@model_path/w.bin": BLOB}, orion.CompileError, "offset 65"),
    ("weight dtype differs", weighted(ty="tensor<fp32, [1, 64, 1, 1]>"), {"@model_path/w.bin": BLOB},
     orion.CompileError, "Float32"),
    ("weight size differs", weighted(ty="tensor<fp16, [1, 32, 1, 1]>"), {"@model_path/w.bin": BLOB},
     orion.CompileError, "size_in_bytes"),
    ("weight file is garbage", weighted(), {"@model_path/w.bin": b"garbage" * 20}, orion.CompileError,
     "0xDEADBEEF"),
    ("weight key without @model_path/", weighted(path="w.bin"), {"w.bin": BLOB}, orion.InputError, "@model_path/"),
    ("weight value not bytes", weighted(), {"@model_path/w.bin": 5}, orion.InputError, "must be bytes"),
    ("weight key not a string", prog(), {5: BLOB}, orion.InputError, "keys must be str"),
    ("text not str or bytes", 5, {}, orion.InputError, "str or bytes"),
]


def test_two_mains_case_has_two_mains():
    text = next(c[1] for c in CASES if c[0] == "two functions named main")
    assert text.count("func main<") == 2


@pytest.mark.parametrize("name,text,weights,exc,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_program(name, text, weights, exc, needle):
    with pytest.raises(exc) as e:
        orion.compile_mil(text, weights, device="sim")
    assert needle in str(e.value)
