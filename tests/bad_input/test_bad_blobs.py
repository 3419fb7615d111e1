"""Weight files of a MIL program as ``orion run`` resolves and fills them: paths outside the weights
folder, a folder where a file goes, declarations --random-weights cannot produce. The MILBlob reader's
own malformed-file cases are in tests/native/test_blob.py; blob contents that disagree with the program
in test_bad_mil.py."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from orion import mil
from orion.cli.run import load_weights, random_blob_file
from orion.demo import _HEADER

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
