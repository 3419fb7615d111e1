"""coremltools as the oracle of tests/quant (skipped cleanly where it is not installed)."""

from __future__ import annotations

import contextlib
import gc
import io
import struct
import warnings

import numpy as np
import pytest


def coremltools_module(name: str):
    """Import ``name`` (a coremltools module) or skip; coremltools prints noise on Linux at import."""
    quiet = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        warnings.simplefilter("ignore")
        pytest.importorskip("coremltools")
        return pytest.importorskip(name)


def one_blob_file(dtype_code: int, payload: np.ndarray, padding_bits: int) -> bytes:
    """A spec-exact MILBlob v2 file holding one payload (layout: src/orion_native/blob/blob.h)."""
    header = struct.pack("<II", 1, 2).ljust(64, b"\0")
    meta = struct.pack("<IIQQQ", 0xDEADBEEF, dtype_code, payload.size, 128, padding_bits).ljust(64, b"\0")
    return header + meta + payload.tobytes()


def coremltools_weight_file(tmp_path, prog, target) -> bytes:
    """The weight.bin that ``ct.convert`` writes for the MIL ``prog`` (an mlprogram package, never loaded)."""
    ct = coremltools_module("coremltools")
    pkg = tmp_path / "q.mlpackage"
    with warnings.catch_warnings():
        # the converted model leaves its temporary weights folder to the garbage collector
        warnings.simplefilter("ignore", ResourceWarning)
        model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=target, skip_model_load=True,
                           package_dir=str(pkg))
        del model
        gc.collect()
    return (pkg / "Data" / "com.apple.CoreML" / "weights" / "weight.bin").read_bytes()
