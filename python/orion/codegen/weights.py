"""Weight files for one program: MILBlob v2 bytes, the weight dictionary and BLOBFILE offsets.

Layouts (C18/C32): ``"multi"`` (default) puts every weight of the program into one multi-blob file
``@model_path/weights/weight.bin``; ``"per_tensor"`` writes ``@model_path/weights/<name>.bin`` per tensor
(offset 64 each), the portable choice for M1. Offsets are metadata-record offsets (C08).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.graph import Graph, Value
from ..passes.budget import is_blob_const
from ..passes.check_weights import to_fp16

MODEL_PATH = "@model_path/weights/"
MULTI_FILE = MODEL_PATH + "weight.bin"


@dataclass
class WeightFiles:
    files: dict[str, bytes] = field(default_factory=dict)          # the runtime's weight dictionary
    refs: dict[int, tuple[str, int]] = field(default_factory=dict)  # id(const value) -> (path, offset)

    @property
    def nbytes(self) -> int:
        return sum(len(b) for b in self.files.values())


def blob_array(v: Value) -> np.ndarray:
    return to_fp16(v.node) if v.dtype == "fp16" else np.ascontiguousarray(np.asarray(v.data, np.float32))


def build(graph: Graph, layout: str = "multi") -> WeightFiles:
    from ..blob import write_blob_file
    consts = [n.out for n in graph.nodes if is_blob_const(n.out)]
    wf = WeightFiles()
    if not consts:
        return wf
    if layout == "multi":
        data, offsets = write_blob_file([blob_array(v) for v in consts])
        wf.files[MULTI_FILE] = data
        for v, off in zip(consts, offsets):
            wf.refs[id(v)] = (MULTI_FILE, int(off))
    else:
        for v in consts:
            path = f"{MODEL_PATH}{v.mil_name}.bin"
            data, offsets = write_blob_file([blob_array(v)])
            wf.files[path] = data
            wf.refs[id(v)] = (path, int(offsets[0]))
    return wf
