"""Weight files of a MIL program as ``orion run`` resolves and fills them: paths outside the weights
folder, a folder where a file goes, declarations --random-weights cannot produce. The MILBlob reader's
own malformed-file cases are in tests/native/test_blob.py; blob contents that disagree with the program
in test_bad_mil.py."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from orion.native import mil
from orion.cli.run import load_weights, random_blob_file
from orion.cli.demo import _HEADER

T = "tensor<fp16, [1, 8, 1, 4]>"


def _prog(*consts):
    lines = [f'        {ty} {n} = const()[name = string("{n}"), val = {ty}(BLOBFILE(path = string("{path}"), '
             f'offset = uint64({off})))];' for n, ty, path, off in consts]
    return _HEADER + f"    func main<ios18>({T} x) {{\n" + "\n".join(lines) + "\n    } -> (x);\n}\n"


W = "tensor<fp16, [1, 8, 1, 1]>"
CASES = [
    ("path leaves the folder", [("w", W, "@model_path/../outside.bin", 64)], "leaves the weights folder"),
    ("path without @model_path/", [("w", W, "weights/w.bin", 64)], "does not start with '@model_path/'"),
    ("weight file is a folder", [("w", W, "@model_path/sub", 64)], "not a regular file"),
    ("one offset, two declarations", [("a", W, "@model_path/w.bin", 64),
                                      ("b", "tensor<fp16, [1, 4, 1, 1]>", "@model_path/w.bin", 64)],
     "as fp16[1, 8, 1, 1] elsewhere"),
    ("offsets with a gap", [("a", W, "@model_path/w.bin", 64), ("b", W, "@model_path/w.bin", 4096)],
     "write this weight file yourself"),
    ("first offset not 64", [("a", W, "@model_path/w.bin", 128)], "offsets [128]"),
    ("a dtype with no random generator", [("a", "tensor<bool, [4]>", "@model_path/w.bin", 64)],
     "cannot generate bool weights"),
]


@pytest.mark.parametrize("name,consts,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_weight_declarations(tmp_path, name, consts, needle):
    (tmp_path / "sub").mkdir()
    parsed = mil.parse(_prog(*consts))
    with pytest.raises(orion.InputError) as e:
        load_weights(parsed, str(tmp_path), random_missing=True, seed=0)
    assert needle in str(e.value)


def test_random_blob_file_refuses_what_the_writer_cannot_store():
    with pytest.raises(orion.InputError, match="uint64"):
        random_blob_file("@model_path/w.bin", {64: ("uint64", (2,))}, np.random.default_rng(0))


# --- orion.blob.read_blob's own arguments: typed before native code sees them ---------------------------

def _blob_file():
    from orion.native.blob import write_blob_file
    return write_blob_file([np.arange(8, dtype=np.float16)])[0]


READ_ARG_CASES = [
    ("shape beyond the file, dtype given", dict(shape=(2**40, 2**40), dtype=np.float16),
     ["shape (1099511627776, 1099511627776) needs 2417851639229258349412352 payload bytes", "only 16 follow"]),
    ("shape beyond 64 bits, dtype given", dict(shape=(2**62, 4), dtype=np.float16), ["needs", "only 16 follow"]),
    ("shape beyond the file, no dtype", dict(shape=(2**40, 2**40)), ["needs at least", "only 16 follow"]),
    ("a float dimension", dict(shape=(8.5,)), ["shape dimension must be an integer", "8.5"]),
    ("a bool dimension", dict(shape=(True, 8)), ["shape dimension must be an integer", "True"]),
    ("a string shape", dict(shape="ab"), ["shape must be an integer or a tuple"]),
    ("a nested shape", dict(shape=[[2, 4]]), ["shape dimension must be an integer", "[2, 4]"]),
    ("an unknown dtype", dict(dtype="nonsense"), ["dtype 'nonsense' is not a numpy dtype"]),
    ("a string offset", dict(offset="64"), ["offset must be an integer", "'64'"]),
    ("a float offset", dict(offset=64.0), ["offset must be an integer", "64.0"]),
    ("a bool offset", dict(offset=True), ["offset must be an integer", "True"]),
    ("a negative offset", dict(offset=-64), ["offset -64 is negative"]),
    ("an offset past the file with a shape", dict(offset=2**70, shape=(4,), dtype=np.float16),
     ["needs 8 payload bytes", "only 0 follow"]),
    ("text instead of bytes", dict(data="abc"), ["must be bytes or another buffer", "str"]),
    ("None instead of bytes", dict(data=None), ["must be bytes or another buffer", "NoneType"]),
    ("strict a string", dict(strict="yes"), ["strict must be True or False"]),
]


@pytest.mark.parametrize("kw,needles", [c[1:] for c in READ_ARG_CASES], ids=[c[0] for c in READ_ARG_CASES])
def test_read_blob_refuses_bad_arguments(tmp_path, kw, needles):
    from orion.native.blob import read_blob
    f = tmp_path / "w.bin"
    f.write_bytes(_blob_file())
    kw = dict(kw)
    data = kw.pop("data", f.read_bytes())
    with pytest.raises(orion.BlobFormatError) as e:
        read_blob(data, kw.pop("offset", 64), **kw)
    assert all(w in str(e.value) for w in needles), str(e.value)
    assert f.read_bytes() == _blob_file()


def test_read_blob_still_takes_numpy_shapes_and_offsets():
    from orion.native.blob import read_blob
    data = _blob_file()
    assert read_blob(data, np.uint64(64), dtype=np.float16, shape=np.array([2, 4])).shape == (2, 4)
    assert read_blob(data, 64, dtype="float16", shape=np.int64(8)).tolist() == list(range(8))
