"""Malformed safetensors files: a ModelFormatError naming the file and what is wrong, never a bare
ValueError/TypeError/RecursionError or a tensor read from the wrong bytes. The shape overflow
and the __metadata__ types are in tests/models/test_bad_model_files.py."""

from __future__ import annotations

import json
import struct

import pytest

from orion.errors import ModelFormatError
from orion.native.safetensors import SafetensorsFile


def _entry(**kw):
    return {"w": dict({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, **kw)}


def _file(path, header=None, data=b"\0" * 8, raw=None, length=None):
    h = raw if raw is not None else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h) if length is None else length) + h + data)


CASES = [
    ("empty file", dict(whole=b""), "truncated"),
    ("3 bytes", dict(whole=b"\1\2\3"), "truncated"),
    ("header length past the end", dict(header=_entry(), length=10 ** 6), "header length 1000000"),
    ("header length 2**63", dict(header=_entry(), length=2 ** 63), "header length"),
    ("header not JSON", dict(raw=b"{not json"), "not JSON"),
    ("header not UTF-8", dict(raw=b'{"\xff": 1}'), "not JSON"),
    ("header a list", dict(header=[1, 2]), "JSON object"),
    ("header nested too deeply", dict(raw=b"[" * 100_000 + b"]" * 100_000), "nested too deeply"),
    ("entry a number", dict(header={"w": 5}), "malformed header entry"),
    ("entry without dtype", dict(header={"w": {"shape": [2], "data_offsets": [0, 8]}}), "malformed header entry"),
    ("entry without offsets", dict(header={"w": {"dtype": "F32", "shape": [2]}}), "malformed header entry"),
    ("unknown dtype", dict(header=_entry(dtype="F128")), "unsupported dtype 'F128'"),
    ("dtype a number", dict(header=_entry(dtype=5)), "unsupported dtype 5"),
    ("negative dimension", dict(header=_entry(shape=[-2])), "negative dimension"),
    ("shape a string", dict(header=_entry(shape="2")), "not a list of integers"),
    ("shape of floats", dict(header=_entry(shape=[2.0])), "not a list of integers"),
    ("shape of booleans", dict(header=_entry(shape=[True, 2])), "not a list of integers"),
    ("offsets a string", dict(header=_entry(data_offsets="0-8")), "malformed header entry"),
    ("three offsets", dict(header=_entry(data_offsets=[0, 4, 8])), "malformed header entry"),
    ("offsets of floats", dict(header=_entry(data_offsets=[0.0, 8.0])), "not integers"),
    ("offsets reversed", dict(header=_entry(data_offsets=[8, 0])), "data_offsets [8, 0]"),
    ("offsets past the data", dict(header=_entry(data_offsets=[0, 800])), "data_offsets [0, 800]"),
    ("size differs from the shape", dict(header=_entry(data_offsets=[0, 4])), "expected 8 for F32[2]"),
    ("overlapping tensors", dict(header={"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                         "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
                                 data=b"\0" * 12), "overlap"),
]


@pytest.mark.parametrize("name,spec,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_safetensors(tmp_path, name, spec, needle):
    p = tmp_path / "x.safetensors"
    spec = dict(spec)
    if "whole" in spec:
        p.write_bytes(spec["whole"])
    else:
        _file(p, spec.get("header"), spec.get("data", b"\0" * 8), spec.get("raw"), spec.get("length"))
    with pytest.raises(ModelFormatError) as e:
        SafetensorsFile(str(p))
    assert needle in str(e.value) and str(p) in str(e.value)


def test_a_folder_and_a_missing_file(tmp_path):
    for p, needle in ((tmp_path, "is a folder"), (tmp_path / "nope.safetensors", "no such file")):
        with pytest.raises(ModelFormatError) as e:
            SafetensorsFile(str(p))
        assert needle in str(e.value) and str(p) in str(e.value)
