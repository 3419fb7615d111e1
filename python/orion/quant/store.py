"""Compressed weights as one safetensors file: :func:`write_quantized` / :func:`read_quantized` round-trip a dict of
:class:`~.common.QuantizedTensor` (with its :class:`~.weights.WeightReport`) so a model's compressed weights are
computed once and then memory-mapped (``orion.models.load(path, quantize=...)`` keeps them beside the weight
cache): the arrays read back are zero-copy views of the file, whose pages the engine hands back to the OS once
the programs hold the weights (:mod:`orion.models.host_pages`).

Layout: tensor ``<weight>/<field>`` per array field of the dataclass (a :class:`~.packing.PackedInts`: its
payload), the rest - class, PackedInts shape / bits / sign, ints - in the ``orion_quantized`` metadata (JSON),
the report in ``orion_report``. Reading re-runs each dataclass' own validation, so a corrupt or mismatched
file is a :class:`~orion.errors.ModelFormatError`, never a silently wrong weight."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from ..errors import ModelFormatError, QuantizationError
from ..native.safetensors import SafetensorsFile, write_safetensors
from .blockwise import BlockwiseQuantized
from .common import QuantizedTensor
from .int8 import AffineQuantized
from .packing import PackedInts, packed_size
from .palettize import LutQuantized
from .weights import WeightReport

__all__ = ["write_quantized", "read_quantized", "tensor_arrays", "STORE_FORMAT"]

STORE_FORMAT = 1
_CLASSES = {c.__name__: c for c in (AffineQuantized, LutQuantized, BlockwiseQuantized)}


def tensor_arrays(q: QuantizedTensor) -> list[np.ndarray]:
    """The numpy arrays ``q`` holds (PackedInts payloads included)."""
    out = []
    for f in dataclasses.fields(q):
        v = getattr(q, f.name)
        if isinstance(v, PackedInts):
            out.append(v.payload)
        elif isinstance(v, np.ndarray):
            out.append(v)
    return out


def write_quantized(path: str, quantized: dict, report: WeightReport, metadata: dict | None = None) -> None:
    """Writes ``quantized`` (name -> QuantizedTensor) and ``report`` to ``path`` atomically."""
    tensors, layout = {}, {}
    for name, q in quantized.items():
        if type(q).__name__ not in _CLASSES:
            raise QuantizationError(f"{name}: cannot store a {type(q).__name__}")
        fields = {}
        for f in dataclasses.fields(q):
            v = getattr(q, f.name)
            if isinstance(v, PackedInts):
                tensors[f"{name}/{f.name}"] = v.payload
                fields[f.name] = {"packed": [list(v.shape), v.bits, v.signed]}
            elif isinstance(v, np.ndarray):
                tensors[f"{name}/{f.name}"] = v
                fields[f.name] = {"array": True}
            elif v is None or isinstance(v, (bool, int, str)):
                fields[f.name] = {"value": v}
            else:
                raise QuantizationError(f"{name}: cannot store field {f.name} of type {type(v).__name__}")
        layout[name] = {"class": type(q).__name__, "fields": fields}
    rep = {"scheme": report.scheme, "tensors": {k: list(v) for k, v in report.tensors.items()},
           "kept": list(report.kept), "fp16_bytes": report.fp16_bytes, "quantized_bytes": report.quantized_bytes}
    meta = {"orion_quantized": json.dumps(layout), "orion_report": json.dumps(rep),
            "orion_store_format": str(STORE_FORMAT), **(metadata or {})}
    write_safetensors(path, tensors, meta)


def read_quantized(path: str, shapes: dict | None = None) -> tuple[dict, WeightReport, dict]:
    """``(name -> QuantizedTensor of memory-mapped arrays, report, metadata)`` from :func:`write_quantized`'s
    file; ``shapes`` (name -> the dense weight's shape) must match. Raises :class:`ModelFormatError`."""
    st = SafetensorsFile(path)
    try:
        if st.metadata.get("orion_store_format") != str(STORE_FORMAT):
            raise ModelFormatError(f"{path}: store format {st.metadata.get('orion_store_format')!r}, expected "
                                   f"{STORE_FORMAT}")
        layout = json.loads(st.metadata["orion_quantized"])
        r = json.loads(st.metadata["orion_report"])
        report = WeightReport(str(r["scheme"]), {k: tuple(int(x) for x in v) for k, v in r["tensors"].items()},
                              tuple(r["kept"]), int(r["fp16_bytes"]), int(r["quantized_bytes"]))
        out = {}
        for name, entry in layout.items():
            cls = _CLASSES[entry["class"]]
            kw = {}
            for fname, spec in entry["fields"].items():
                if "packed" in spec:
                    shape, bits, signed = spec["packed"]
                    payload, shape = st.get(f"{name}/{fname}"), tuple(int(s) for s in shape)
                    if payload.dtype not in (np.uint8, np.int8) or payload.ndim != 1 or \
                            payload.size != packed_size(math.prod(shape), int(bits)):
                        raise ModelFormatError(f"{path}: {name}/{fname} is not the packed payload of {list(shape)} "
                                               f"{int(bits)}-bit values")
                    kw[fname] = PackedInts(payload, shape, int(bits), bool(signed))
                elif "array" in spec:
                    kw[fname] = st.get(f"{name}/{fname}")
                else:
                    kw[fname] = spec["value"]
            q = cls(**kw)
            if shapes is not None and tuple(q.shape) != tuple(shapes.get(name, ())):
                raise ModelFormatError(f"{path}: {name} has shape {list(q.shape)}, the model's weight "
                                       f"{list(shapes.get(name, ()))}")
            expected_bytes = report.tensors.get(name, (0, -1))[1]
            if q.nbytes != expected_bytes:
                raise ModelFormatError(f"{path}: {name} holds {q.nbytes} bytes, its report says {expected_bytes}")
            out[name] = q
    except ModelFormatError:
        raise
    except (KeyError, TypeError, ValueError, QuantizationError, json.JSONDecodeError) as e:
        raise ModelFormatError(f"{path}: not a compressed-weights file orion can read ({type(e).__name__}: {e})") \
            from None
    if set(out) != set(report.tensors):
        raise ModelFormatError(f"{path}: its tensors and its report name different weights")
    return out, report, dict(st.metadata)
