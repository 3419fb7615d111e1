#!/usr/bin/env python3
"""atheris fuzz harness for the MIL text parser and printer (_native.mil_format / _native.mil_parse).

    PYTHONPATH=python:<build dir> python fuzz/fuzz_mil.py -max_total_time=600 [corpus_dir]

The native module is normally built with gcc, so libFuzzer sees no coverage inside the C++ parser.
Stand-ins: two thirds of the inputs are *structured* (a seed program edited token by token, or a
const statement with a generated literal of every form: decimal and hex floats, integers at their
range limits, strings with escapes, tensors with right and wrong element counts), the rest raw bytes
(sometimes as a str with lone surrogates); and every syntax-error message is classified by an
instrumented Python if-chain, so each distinct parser diagnostic is a coverage edge. For memory
errors run it against an ORION_SANITIZE=ON build with
LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0.

For real coverage inside the C++ parser, build the module with clang and sanitizer coverage and
preload a shared libFuzzer (atheris then uses it instead of its private copy, so the module's
coverage hooks resolve):

    cmake -S . -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_CXX_FLAGS=-fsanitize-coverage=inline-8bit-counters,pc-table,trace-cmp
    cmake --build build/fuzz --target _native
    clang++ -shared -o build/fuzz/libfuzzer.so -Wl,--whole-archive \
      $(clang++ -print-resource-dir)/lib/linux/libclang_rt.fuzzer_no_main-x86_64.a -Wl,--no-whole-archive
    LD_PRELOAD=build/fuzz/libfuzzer.so PYTHONPATH=python:build/fuzz python fuzz/fuzz_mil.py ...

Anything but orion.MILSyntaxError is a finding, and so is a violated invariant:
- an error's line/column lie inside the text and the message starts "MIL syntax error at L:C: ";
- accepted text prints to canonical text that prints to itself (idempotent) and parses to the same
  program (floats compared after rounding to their dtype; a legacy program may respell bare
  scalar types as rank-0 tensors);
- generated literals that are accepted hold exactly the value Python computes for the same text
  (float(), float.fromhex(), int()), and integers/fp16/fp32 values out of range are rejected.
"""

from __future__ import annotations

import math
import re
import sys

import atheris
import numpy as np

with atheris.instrument_imports():
    import orion
    from orion import _native

SEEDS = [
    # iOS18 dialect: scalars, vectors, BLOBFILE, tuple, inline literal args, constexpr attrs
    'program(1.3)\n[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, {"coremlc-version", "3505.4.1"}})]\n'
    "{\n    func main<ios18>(tensor<fp16, [1, 768, 1, 64]> x, tensor<fp16, [1, 768, 1, 64]> y) {\n"
    '        tensor<int32, [1]> ax = const()[name = string("ax"), val = tensor<int32, [1]>([1])];\n'
    '        bool kd = const()[name = string("kd"), val = bool(true)];\n'
    '        tensor<fp16, [1, 1, 1, 64]> ss = reduce_sum(x = x, axes = ax, keep_dims = kd)[name = string("ss")];\n'
    '        fp16 eps = const()[name = string("eps"), val = fp16(0x1.5p-17)];\n'
    '        fp16 nh = const()[name = string("nh"), val = fp16(-0.5)];\n'
    '        tensor<fp16, [1, 768, 1, 1]> g = const()[name = string("g"), val = tensor<fp16, [1, 768, 1, 1]>(BLOBFILE(path = string("@model_path/weights/rms.bin"), offset = uint64(64)))];\n'
    '        tensor<fp16, [1, 1536, 1, 64]> c = concat(axis = ax, interleave = bool(false), values = (x, y))[name = string("c")];\n'
    '        tensor<int8, [4, 4]> q = constexpr_affine_dequantize()[axis = int32(0), name = string("q"), quantized_data = tensor<int8, [4, 4]>(BLOBFILE(path = string("@model_path/q.bin"), offset = uint64(64))), scale = fp16(0x1p-3), zero_point = int8(-128)];\n'
    '        string s = const()[name = string("s"), val = string("a\\"b\\\\c\\n\u00e9")];\n'
    "    } -> (ss, c);\n}\n",
    # legacy dialect, two functions
    'program(1.0)\n[buildInfo = dict<tensor<string, []>, tensor<string, []>>({{"coremlc-version", "3505.4.1"}})]\n'
    "{\n    func main<ios16>(tensor<fp16, [1, 256, 1, 128]> a, tensor<fp16, [1, 256, 1, 128]> b) {\n"
    '        tensor<int32, []> gr = const()[name = tensor<string, []>("gr"), val = tensor<int32, []>(1)];\n'
    '        tensor<fp16, [2]> v = const()[name = tensor<string, []>("v"), val = tensor<fp16, [2]>([0.125, -inf])];\n'
    '        tensor<fp16, [4, 4, 1, 1]> w = const()[name = tensor<string, []>("w"), val = tensor<fp16, [4, 4, 1, 1]>(BLOBFILE(path = tensor<string, []>("@model_path/w.bin"), offset = tensor<uint64, []>(64)))];\n'
    '        tensor<fp16, [1, 256, 1, 128]> z = add(x = a, y = b)[name = tensor<string, []>("z")];\n'
    "    } -> (z);\n"
    "    func aux<ios17>(fp16 x) {\n        fp16 o = identity(x = x)[name = string(\"o\")]; // comment\n    } -> (o);\n}\n",
]

PIECES = ["(", ")", "[", "]", "{", "}", "<", ">", ",", ";", "=", "-", "+", "->", '"', "\\", " ", "\n", "\t",
          "//", "0", "1", "-1", ".5", "1e-05", "0x1p-3", "0x1.554p-10", "1e999", "nan", "inf", "true", "false",
          "tensor<", "tensor<fp16, []>", "tensor<int32, [2]>", "[1, 2]", "[]", "fp16", "fp32", "int8", "uint8",
          "int32", "uint64", "bool", "string", "string(\"x\")", "uint64(64)", "BLOBFILE(", "path", "offset",
          "func", "program", "main<ios18>", "<ios16>", "const()", "name", "val", "x", "\x00", "\xff", "\u00e9",
          "99999999999999999999", "2147483648", "-129", "65520", "1.2.3", "0x1.8", "\"\\q\""]

TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|[A-Za-z_][A-Za-z0-9_]*|[0-9.][0-9A-Za-z_.]*(?:[eEpP][+-][0-9]+)?|->|//[^\n]*|\s+|.',
                   re.S)
SEED_TOKENS = [[t.encode() for t in TOKEN.findall(s)] for s in SEEDS]
PIECE_BYTES = [p.encode() for p in PIECES] + [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]  # + invalid UTF-8

INT_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
             "int32": (-2**31, 2**31 - 1), "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1)}
DTYPES = ["fp16", "fp32", "bool", "string"] + list(INT_RANGE)


@atheris.instrument_func
def classify(msg: str) -> int:
    """One branch per diagnostic family, so libFuzzer counts each as coverage."""
    if "unterminated string" in msg:
        return 1
    if "invalid escape" in msg:
        return 2
    if "invalid UTF-8" in msg:
        return 3 if "in string" in msg else 4 if "in comment" in msg else 5
    if "control character" in msg:
        return 6
    if "unexpected character" in msg:
        return 7
    if "malformed number" in msg:
        return 8 if "hex float" in msg else 9 if "exponent" in msg else 10
    if "out of range for fp" in msg:
        return 11
    if "out of range for" in msg:
        return 12
    if "literal has" in msg:
        return 13
    if "BLOBFILE" in msg:
        return 14
    if "too large" in msg:
        return 15
    if "expected an integer" in msg:
        return 16
    if "must be a scalar" in msg:
        return 17
    if "expected" in msg:
        m = re.search(r"expected (.*?), found (end of input|string|'(.))", msg)
        if m is None:
            return 18
        what, found = m.group(1), m.group(3) or m.group(2)
        if "statement" in what:
            return 19
        if "argument" in what:
            return 20
        if "attribute" in what:
            return 21
        if "literal" in what or "value" in what:
            return 22
        if "dimension" in what or "shape" in what or "type" in what:
            return 23
        if "opset" in what or "func" in what or "program" in what or "return" in what:
            return 24
        if "buildInfo" in what:
            return 25
        return 26 + (hash(found) % 8)
    return 40


@atheris.instrument_func
def round_to(dtype: str, v: float) -> float | str:
    if math.isnan(v):
        return "nan"
    with np.errstate(over="ignore"):
        f = np.float32(v)
        return float(np.float16(f)) if dtype == "fp16" else float(f)


@atheris.instrument_func
def norm(node):
    if isinstance(node, list):
        return [norm(x) for x in node]
    if isinstance(node, dict):
        out = {k: norm(v) for k, v in node.items() if k not in ("line", "column")}
        if node.get("dtype") in ("fp16", "fp32") and "value" in node:
            v = node["value"]
            out["value"] = [round_to(node["dtype"], x) for x in v] if isinstance(v, list) else round_to(node["dtype"], v)
        return out
    return node


@atheris.instrument_func
def strip_scalar_form(node):
    if isinstance(node, list):
        return [strip_scalar_form(x) for x in node]
    if isinstance(node, dict):
        return {k: strip_scalar_form(v) for k, v in node.items() if k != "scalar_form"}
    return node


@atheris.instrument_func
def check_error(text: bytes | str, e: orion.MILSyntaxError) -> None:
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    lines = data.split(b"\n")
    assert 1 <= e.line <= len(lines), (e.line, e.column, str(e))
    assert 1 <= e.column <= len(lines[e.line - 1]) + 1, (e.line, e.column, str(e))
    assert str(e).startswith(f"MIL syntax error at {e.line}:{e.column}: "), str(e)
    classify(str(e))


@atheris.instrument_func
def check(text: bytes | str) -> dict | None:
    """Runs the invariants; returns the parsed program when accepted."""
    try:
        out = _native.mil_format(text)
    except orion.MILSyntaxError as e:
        check_error(text, e)
        return None
    assert _native.mil_format(out) == out, "format is not idempotent"
    ast = _native.mil_parse(text)
    a, b = norm(ast), norm(_native.mil_parse(out))
    if a != b:
        assert ast["dialect"] == "ios16" and strip_scalar_form(a) == strip_scalar_form(b), "round trip changed the program"
    return ast


@atheris.instrument_func
def structured(fdp: atheris.FuzzedDataProvider) -> bytes:
    toks = list(SEED_TOKENS[fdp.ConsumeIntInRange(0, len(SEED_TOKENS) - 1)])
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        op = fdp.ConsumeIntInRange(0, 4)
        i = fdp.ConsumeIntInRange(0, len(toks) - 1)
        if op == 0:
            del toks[i]
        elif op == 1:
            toks.insert(i, toks[i])
        elif op == 2:
            toks[i] = PIECE_BYTES[fdp.ConsumeIntInRange(0, len(PIECE_BYTES) - 1)]
        elif op == 3:
            toks.insert(i, PIECE_BYTES[fdp.ConsumeIntInRange(0, len(PIECE_BYTES) - 1)])
        else:
            toks[i] = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 8))
    return b"".join(toks)


@atheris.instrument_func
def number_text(fdp: atheris.FuzzedDataProvider, dtype: str) -> tuple[str, object]:
    """A numeric literal spelling and the value Python gives it (None when not a valid number)."""
    kind = fdp.ConsumeIntInRange(0, 5)
    if dtype in INT_RANGE or kind == 0:
        lo, hi = INT_RANGE.get(dtype, (-2**40, 2**40))
        v = fdp.PickValueInList([lo, hi, lo - 1, hi + 1, 0, -1, 1]) if fdp.ConsumeBool() else \
            fdp.ConsumeIntInRange(lo - 2, hi + 2)
        spell = (("-" if v < 0 else "") + hex(abs(v))) if fdp.ConsumeIntInRange(0, 3) == 0 else str(v)
        return spell, v
    if kind == 1:  # hex float
        mant = fdp.ConsumeIntInRange(0, 2**60)
        frac_digits = fdp.ConsumeIntInRange(0, 15)
        h = f"{mant:x}"
        body = h[:-frac_digits] + "." + h[-frac_digits:] if 0 < frac_digits < len(h) else h + "."
        exp = fdp.ConsumeIntInRange(-1200, 1200)
        spell = ("-" if fdp.ConsumeBool() else "") + f"0x{body}p{exp}"
        try:
            return spell, float.fromhex(spell)
        except OverflowError:
            return spell, math.copysign(math.inf, -1 if spell.startswith("-") else 1)
    if kind == 2:
        return fdp.PickValueInList(["inf", "-inf", "nan", "+inf"]), None
    digits = str(fdp.ConsumeIntInRange(0, 10**fdp.ConsumeIntInRange(1, 25)))
    dot = fdp.ConsumeIntInRange(0, len(digits))
    spell = digits[:dot] + "." + digits[dot:]
    if fdp.ConsumeBool():
        spell += fdp.PickValueInList(["e", "E"]) + str(fdp.ConsumeIntInRange(-400, 400))
    if fdp.ConsumeBool():
        spell = "-" + spell
    return spell, float(spell)


@atheris.instrument_func
def string_text(fdp: atheris.FuzzedDataProvider) -> tuple[str, str]:
    parts, value = [], []
    for _ in range(fdp.ConsumeIntInRange(0, 6)):
        c = fdp.PickValueInList(['\\"', "\\\\", "\\n", "\\t", "a", "\u00e9", "\U0001f600", " ", "/"])
        parts.append(c)
        value.append({'\\"': '"', "\\\\": "\\", "\\n": "\n", "\\t": "\t"}.get(c, c))
    return '"' + "".join(parts) + '"', "".join(value)


@atheris.instrument_func
def literal_case(fdp: atheris.FuzzedDataProvider) -> None:
    dtype = fdp.PickValueInList(DTYPES)
    legacy = fdp.ConsumeBool()
    shape = [fdp.ConsumeIntInRange(0, 3) for _ in range(fdp.ConsumeIntInRange(0, 2))]
    n = int(np.prod(shape)) if shape else 1
    count = n if fdp.ConsumeIntInRange(0, 5) else fdp.ConsumeIntInRange(0, 4)
    spells, values = [], []
    for _ in range(count):
        if dtype == "bool":
            s = fdp.PickValueInList(["true", "false"])
            spells.append(s)
            values.append(s == "true")
        elif dtype == "string":
            s, v = string_text(fdp)
            spells.append(s)
            values.append(v)
        else:
            s, v = number_text(fdp, dtype)
            spells.append(s)
            values.append(v)
    tensor_form = bool(shape) or fdp.ConsumeBool()
    if tensor_form:
        lit = f"tensor<{dtype}, [{', '.join(map(str, shape))}]>([{', '.join(spells)}])"
    else:
        lit = f"{'tensor<' + dtype + ', []>' if legacy else dtype}({', '.join(spells)})"
    name = 'tensor<string, []>("c")' if legacy else 'string("c")'
    text = (f"program({'1.0' if legacy else '1.3'})\n{{\n    func main<{'ios16' if legacy else 'ios18'}>() {{\n"
            f"        fp16 c = const()[name = {name}, val = {lit}];\n    }} -> (c);\n}}\n")
    ast = check(text)
    expect_ok = (count == n) if tensor_form else (count == 1)
    for s, v in zip(spells, values):
        if dtype in INT_RANGE:
            expect_ok &= isinstance(v, int) and INT_RANGE[dtype][0] <= v <= INT_RANGE[dtype][1]
        elif dtype in ("fp16", "fp32") and isinstance(v, (int, float)) and v is not None:
            expect_ok &= not (math.isfinite(v) and math.isinf(round_to(dtype, v) if not math.isnan(v) else 0))
            expect_ok &= not (isinstance(v, float) and math.isinf(v) and "inf" not in s)
    if ast is None:
        assert not expect_ok, f"valid literal rejected: {lit}"
        return
    assert expect_ok, f"invalid literal accepted: {lit}"
    got = ast["functions"][0]["stmts"][0]["attrs"]["val"]["value"]
    got = got if isinstance(got, list) else [got]
    for s, v, g in zip(spells, values, got):
        if v is None:  # inf / nan spellings
            assert (math.isnan(g) and "nan" in s) or g == (-math.inf if s.startswith("-") else math.inf), (s, g)
        elif isinstance(v, float) and math.isnan(v):
            assert math.isnan(g)
        else:
            assert g == v and (not isinstance(v, float) or math.copysign(1, g) == math.copysign(1, v)), (s, v, g)


@atheris.instrument_func
def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 2)
    if mode == 0:
        raw = fdp.ConsumeBytes(fdp.remaining_bytes())
        if raw[:1] == b"s":  # also exercise the str path, lone surrogates included
            check(raw.decode("utf-8", "surrogateescape"))
        else:
            check(raw)
    elif mode == 1:
        check(structured(fdp))
    else:
        literal_case(fdp)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
