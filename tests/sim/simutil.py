"""Helpers for the simulator tests: hand-written MIL programs, spec-exact MILBlob files, and a runner
around the native test hook ``_native.testing.sim_run`` (parse -> build plan -> execute once)."""

from __future__ import annotations

import struct

import numpy as np

from orion import _native

BUILDINFO = ('[buildInfo = dict<string, string>({{"coremlc-component-MIL", "3510.2.1"}, '
             '{"coremlc-version", "3505.4.1"}, {"coremltools-component-milinternal", ""}, '
             '{"coremltools-version", "9.0"}})]')

NP = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "int8": np.int8, "uint8": np.uint8,
      "bool": np.bool_}


def ttype(dtype: str, shape) -> str:
    """MIL type text: ``tensor<fp16, [1, 2]>``, or the bare scalar form for shape None."""
    if shape is None:
        return dtype
    return f"tensor<{dtype}, [{', '.join(str(int(d)) for d in shape)}]>"


def program(params: dict, body: list[str], returns: list[str], opset: str = "ios18") -> str:
    """An iOS18-dialect program: params {name: (dtype, shape)}, body = statement lines."""
    ps = ", ".join(f"{ttype(d, s)} {n}" for n, (d, s) in params.items())
    lines = "\n".join("        " + b for b in body)
    return (f"program(1.3)\n{BUILDINFO}\n{{\n    func main<{opset}>({ps}) {{\n{lines}\n"
            f"    }} -> ({', '.join(returns)});\n}}\n")


def lit(v, dtype: str = "fp16") -> str:
    """Scalar literal text, e.g. fp16(0.5), int32(3), bool(true), string("valid")."""
    if dtype == "bool":
        return f"bool({'true' if v else 'false'})"
    if dtype == "string":
        return f'string("{v}")'
    if dtype in ("fp16", "fp32"):
        return f"{dtype}({float(v)!r})"
    return f"{dtype}({int(v)})"


def tlit(values, dtype: str = "int32") -> str:
    """Tensor literal text of a 1-D or n-D array."""
    a = np.asarray(values)
    if dtype == "bool":
        items = ", ".join("true" if x else "false" for x in a.ravel())
    elif dtype in ("fp16", "fp32"):
        items = ", ".join(repr(float(x)) for x in a.ravel())
    else:
        items = ", ".join(str(int(x)) for x in a.ravel())
    return f"{ttype(dtype, a.shape)}([{items}])"


def const(name: str, value, dtype: str = "int32", tensor: bool | None = None) -> str:
    """A const statement; scalars use the bare form unless tensor=True."""
    a = np.asarray(value)
    if dtype == "string" or (a.ndim == 0 and not tensor):
        return f'{ttype(dtype, None)} {name} = const()[name = string("{name}"), val = {lit(value, dtype)}];'
    return f'{ttype(dtype, a.shape)} {name} = const()[name = string("{name}"), val = {tlit(a, dtype)}];'


def blob_const(name: str, dtype: str, shape, path: str, offset: int = 64) -> str:
    t = ttype(dtype, shape)
    return (f'{t} {name} = const()[name = string("{name}"), val = {t}(BLOBFILE(path = string("{path}"), '
            f"offset = uint64({offset})))];")


def stmt(out: str, dtype: str, shape, op: str, /, **args) -> str:
    """``TYPE out = op(k = v, ...)[name = string("out")];`` (args alphabetical, as upstream emits)."""
    a = ", ".join(f"{k} = {v}" for k, v in sorted(args.items()))
    return f'{ttype(dtype, shape)} {out} = {op}({a})[name = string("{out}")];'


BLOB_CODES = {np.dtype(np.float16): 1, np.dtype(np.float32): 2, np.dtype(np.uint8): 3, np.dtype(np.int8): 4,
              np.dtype(np.int32): 14}


def blob_file(*arrays) -> tuple[bytes, list[int]]:
    """Spec-exact MILBlob v2 file (src/orion_native/blob/blob.h): 64-byte header (count, version 2), per blob
    a 64-byte metadata record (0xDEADBEEF, dtype code, u64 size, u64 offset = M + 64), the payload,
    zero padding to 64 between blobs. Returns (file bytes, metadata offsets = MIL BLOBFILE offsets)."""
    out = bytearray(struct.pack("<II56x", len(arrays), 2))
    offsets = []
    for i, a in enumerate(arrays):
        a = np.ascontiguousarray(a)
        m = len(out)
        offsets.append(m)
        payload = a.tobytes()
        out += struct.pack("<IIQQQ32x", 0xDEADBEEF, BLOB_CODES[a.dtype], len(payload), m + 64, 0)
        out += payload
        if i + 1 < len(arrays):
            out += b"\0" * ((-len(out)) % 64)
    return bytes(out), offsets


def run(text: str, weights: dict | None = None, inputs: dict | None = None, chip: str = "m4",
        strictness: str = "strict", concurrent: int = 1):
    """(outputs dict, warning strings). concurrent > 1 also runs the plan on that many threads at once
    and fails unless every result equals the first."""
    ins = {k: np.ascontiguousarray(v) for k, v in (inputs or {}).items()}
    return _native.testing.sim_run(text, weights or {}, ins, chip, strictness, concurrent)


def f16(a) -> np.ndarray:
    return np.asarray(a, dtype=np.float16)


def ref(a) -> np.ndarray:
    """float64 view of fp16 data, for references."""
    return np.asarray(a, dtype=np.float64)


def assert_fp16_close(got, want, rtol: float = 2 ** -10, atol: float = 0.0, ulps: float = 1.0):
    """got (fp16 result) vs a float64 reference: |got - want| <= ulps * spacing(want in fp16) + rtol*|want|
    + atol; inf/nan must match exactly."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    fin = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)])
    sp = np.spacing(np.abs(want[fin]).astype(np.float16)).astype(np.float64)
    err = np.abs(got[fin] - want[fin])
    tol = ulps * sp + rtol * np.abs(want[fin]) + atol
    bad = err > tol
    assert not bad.any(), f"max err {err.max()} at {np.argmax(err - tol)}; got {got[fin][bad][:5]}, want {want[fin][bad][:5]}"
