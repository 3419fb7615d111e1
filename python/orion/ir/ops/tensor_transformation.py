"""Shape, layout and indexing: reshape, transpose, slice_by_index, slice_by_size (and ``x[...]``), concat,
split, identity, gather, band_part."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..graph import GraphError, Value, check_shape
from ._core import REQUIRED, _axis, builder, define, make, as_value


define("reshape", lambda i, a: [i["x"].reshape(a["shape"])],
       "shape as an int32 const; costs on the ANE, minimise", attrs={"shape": REQUIRED})


@builder
def reshape(x: Value, shape: Sequence[int], name=None) -> Value:
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise GraphError(f"reshape: at most one -1 in {shape}")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        if known == 0 or x.size % known:
            raise GraphError(f"reshape: cannot infer -1 in {shape} for x{list(x.shape)}")
        shape[shape.index(-1)] = x.size // known
    shape = check_shape(shape, f"reshape of {x!r}")  # C22/C23 (MIL's 0 = "copy that axis" is not IR)
    return make("reshape", {"x": x}, {"shape": tuple(shape)}, name=name)


define("transpose", lambda i, a: [np.transpose(i["x"], a["perm"])], "perm as an int32 const",
       attrs={"perm": REQUIRED})


@builder
def transpose(x: Value, perm: Sequence[int], name=None) -> Value:
    return make("transpose", {"x": x}, {"perm": tuple(int(p) % max(x.rank, 1) for p in perm)}, name=name)


define("slice_by_index",
       lambda i, a: [i["x"][tuple(slice(b, e, s) for b, e, s in zip(a["begin"], a["end"], a["stride"]))]],
       "end exclusive; on function inputs together with norms and convs disputed (C34): the compiler slices inputs "
       "with slice_by_size", attrs={"begin": REQUIRED, "end": REQUIRED, "stride": REQUIRED})


@builder
def slice_by_index(x: Value, begin, end, stride=None, name=None) -> Value:
    begin = [int(b) % d if b < 0 else int(b) for b, d in zip(begin, x.shape)]
    end = [int(e) % d if e < 0 else min(int(e), d) for e, d in zip(end, x.shape)]
    stride = [1] * x.rank if stride is None else [int(s) for s in stride]
    return make("slice_by_index", {"x": x}, {"begin": tuple(begin), "end": tuple(end), "stride": tuple(stride)},
                name=name)


define("slice_by_size",
       lambda i, a: [i["x"][tuple(slice(b % d, b % d + s) for b, s, d in zip(a["begin"], a["size"], i["x"].shape))]],
       "used to unpack packed inputs; width-axis begin != 0 saturates on pre-A16 chips (C35)",
       attrs={"begin": REQUIRED, "size": REQUIRED})


@builder
def slice_by_size(x: Value, begin, size, name=None) -> Value:
    size = [d - b if s == -1 else s for b, s, d in zip(begin, size, x.shape)]
    return make("slice_by_size", {"x": x}, {"begin": tuple(int(b) for b in begin), "size": tuple(int(s) for s in size)},
                name=name)


@builder
def getitem(x: Value, index) -> Value:
    """``x[..., a:b]``: slices (and Ellipsis) only; stride 1 → slice_by_size, else slice_by_index."""
    if not isinstance(index, tuple):
        index = (index,)
    if any(i is Ellipsis for i in index):
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (x.rank - len(index) + 1) + index[k + 1:]
    if len(index) > x.rank:
        raise GraphError(f"too many indices for x{list(x.shape)}")
    index = tuple(index) + (slice(None),) * (x.rank - len(index))
    begin, end, stride = [], [], []
    for k, (s, d) in enumerate(zip(index, x.shape)):
        if not isinstance(s, slice):
            raise GraphError(f"index {s!r} on axis {k}: only slices are supported (use x[..., i:i+1] to keep "
                             f"the ANE's rank-4 layout)")
        b, e, st = s.indices(d)
        if st < 1 or e <= b:
            raise GraphError(f"slice {s} on axis {k} of x{list(x.shape)} is empty or reversed")
        begin.append(b), end.append(e), stride.append(st)
    if all(st == 1 for st in stride):
        return slice_by_size(x, begin, [e - b for b, e in zip(begin, end)])
    return slice_by_index(x, begin, end, stride)


define("concat", lambda i, a: [np.concatenate(i["values"], axis=a["axis"])],
       "decompose turns a concat output into several program outputs; otherwise only the full form (named axis and "
       "interleave) is emitted, with allow_concat=True", attrs={"axis": REQUIRED, "interleave": False})


@builder
def concat(values: Sequence[Value], axis: int, name=None) -> Value:
    vals = tuple(values)
    first = next((v for v in vals if isinstance(v, Value)), None)
    if first is None:
        raise GraphError("concat: needs Values")
    vals = tuple(as_value(v, first, "concat value") for v in vals)
    return make("concat", {"values": vals}, {"axis": _axis("concat", int(axis), first.rank, first.shape),
                                             "interleave": False}, name=name)


define("split", lambda i, a: [i["x"]], "no reference use on the ANE; use slice_by_size",
       attrs={"axis": REQUIRED, "num_splits": 1})


@builder
def split(x: Value, axis: int, num_splits: int = 1, name=None) -> tuple[Value, ...]:
    """The one-part form the simulator runs (a MIL statement here has one result): returns ``(x',)``.
    For several parts use ``slice_by_size`` / ``x[...]``."""
    return (make("split", {"x": x}, {"axis": _axis("split", int(axis), x.rank, x.shape),
                                     "num_splits": int(num_splits)}, name=name),)


define("identity", lambda i, a: [i["x"]],
       "removed by identity elimination except where an output needs an op (C17)")


@builder
def identity(x: Value, name=None) -> Value:
    return make("identity", {"x": x}, name=name)


def _ev_gather(i, a):
    x, ind = i["x"], np.asarray(i["indices"]).astype(np.int64)
    n = x.shape[a["axis"]]
    if np.any((ind < -n) | (ind >= n)):
        raise GraphError(f"gather: an index is out of range for an axis of size {n}")
    return [np.take(x, ind, axis=a["axis"])]


define("gather", _ev_gather,
       "no reference use on the ANE (embeddings stay on the CPU); CoreML dispatches gather to the CPU",
       attrs={"axis": 0})


@builder
def gather(x: Value, indices, axis: int = 0, name=None) -> Value:
    """``x`` indexed by ``indices`` along ``axis`` (negative indices count from the end); ``indices``: an
    int array (baked as an int32 const) or an int32 Value."""
    if not isinstance(indices, Value):
        arr = np.asarray(indices)
        if arr.dtype.kind not in "iu":
            raise GraphError(f"gather: indices must be integers, got dtype {arr.dtype}")
        indices = x.node.graph.const(arr.astype(np.int32), dtype="int32")
    return make("gather", {"x": x, "indices": indices}, {"axis": _axis("gather", int(axis), x.rank, x.shape)},
                name=name)


def _ev_band_part(i, a):
    x = i["x"]
    m, n = x.shape[-2:]
    r, c = np.arange(m)[:, None], np.arange(n)[None, :]
    keep = ((a["lower"] < 0) | (r - c <= a["lower"])) & ((a["upper"] < 0) | (c - r <= a["upper"]))
    return [np.where(keep, x, 0.0)]


define("band_part", _ev_band_part,
       "keeps the band of the last two axes (lower/upper < 0: unbounded); a const additive mask is the proven route",
       attrs={"lower": -1, "upper": -1})


@builder
def band_part(x: Value, lower: int = -1, upper: int = -1, name=None) -> Value:
    return make("band_part", {"x": x}, {"lower": int(lower), "upper": int(upper)}, name=name)
