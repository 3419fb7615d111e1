"""Weight files for one program: MILBlob v2 bytes, the weight dictionary and BLOBFILE offsets.

Layouts (C18/C32): ``"multi"`` (default) puts every weight of the program into one multi-blob file
``@model_path/weights/weight.bin``; ``"per_tensor"`` writes ``@model_path/weights/<name>.bin`` per tensor
(offset 64 each), the portable choice for M1. Offsets are metadata-record offsets (C08).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...ir.graph import Graph, Value
from ...native.blob import write_blob_file
from ..passes.budget import blob_operand_params, is_blob_const
from ..passes.check_weights import to_fp16
from .constexpr import blob_items

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


def compressed_operands(v: Value) -> list[tuple[str, object]]:
    """``[(param, blob item)]`` of a value the codegen writes as a constexpr op with BLOBFILE operands
    (:func:`orion.compiler.passes.budget.blob_operand_params` says which); empty for anything else."""
    q = v.node.attrs.get("quant") if v.op == "const" else None
    if q is not None:
        return [(param, item) for param, _, _, item in blob_items(q)]
    return [(k, v.node.attrs[k]) for k in blob_operand_params(v)]


def build(graph: Graph, layout: str = "multi") -> WeightFiles:
    """Every BLOBFILE tensor of ``graph``: fp16/fp32 weights (``refs[id(v)]``) and the operands of its
    compressed weights (``refs[(id(v), param)]``)."""
    entries = []  # (ref key, file stem, blob item)
    for n in graph.nodes:
        v = n.out
        ops_ = compressed_operands(v)
        if ops_:
            entries += [((id(v), param), f"{v.mil_name}_{param}", item) for param, item in ops_]
        elif is_blob_const(v):
            entries.append((id(v), v.mil_name, blob_array(v)))
    wf = WeightFiles()
    if not entries:
        return wf
    if layout == "multi":
        data, offsets = write_blob_file([item for *_, item in entries])
        wf.files[MULTI_FILE] = data
        for (key, _, _), off in zip(entries, offsets):
            wf.refs[key] = (MULTI_FILE, int(off))
    else:
        for key, stem, item in entries:
            path = f"{MODEL_PATH}{stem}.bin"
            data, offsets = write_blob_file([item])
            wf.files[path] = data
            wf.refs[key] = (path, int(offsets[0]))
    return wf
