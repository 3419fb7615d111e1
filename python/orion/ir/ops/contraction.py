"""Contractions: conv (the workhorse — a linear layer is a 1x1 conv, C46), matmul and
scaled_dot_product_attention."""

from __future__ import annotations

import math

import numpy as np

from ..graph import GraphError, Value
from ._core import _errstate, as_value, builder, define, make
from .activation import _softmax


_CONV_ROWS = 512          # _ev_conv's block of output channels: a float64 copy of at most 512 x Cin weights


def _ev_conv(i, a):
    x, w = i["x"], i["weight"]
    g = a["groups"]
    (sh, sw), (dh, dw) = a["strides"], a["dilations"]
    kh, kw = w.shape[2:]
    if a["pad_type"] == "same":
        oh, ow = -(-x.shape[2] // sh), -(-x.shape[3] // sw)
        ph = max((oh - 1) * sh + dh * (kh - 1) + 1 - x.shape[2], 0)
        pw = max((ow - 1) * sw + dw * (kw - 1) + 1 - x.shape[3], 0)
        pad = (ph // 2, ph - ph // 2, pw // 2, pw - pw // 2)
    else:
        pad = a["pad"] if a["pad_type"] == "custom" else (0, 0, 0, 0)
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[1]), (pad[2], pad[3])))
    n, cin, h, wd = xp.shape
    cout = w.shape[0]
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (wd - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, cout, oh, ow))
    cpg, opg = cin // g, cout // g
    for gi in range(g):
        xs = xp[:, gi * cpg:(gi + 1) * cpg]
        ws = w[gi * opg:(gi + 1) * opg]
        for r in range(kh):
            for c in range(kw):
                patch = xs[:, :, r * dh: r * dh + sh * (oh - 1) + 1: sh, c * dw: c * dw + sw * (ow - 1) + 1: sw]
                # products through BLAS (einsum's own loop was most of a model's float64 probe at load), a block
                # of output channels at a time: a float64 copy of a whole big weight would raise the load's peak
                cols = patch.reshape(n, cpg, oh * ow)
                for o0 in range(0, opg, _CONV_ROWS):
                    rows = np.asarray(ws[o0:o0 + _CONV_ROWS, :, r, c], np.float64)
                    o = gi * opg + o0
                    y[:, o:o + rows.shape[0]] += np.matmul(rows, cols).reshape(n, rows.shape[0], oh, ow)
    if "bias" in i:
        y = y + i["bias"].reshape(1, cout, 1, 1)
    return [y]


define("conv", _ev_conv,
       "linear = 1x1 conv, weight [out, in, 1, 1] on x [1, in, 1, S], ~3x faster than matmul (C46). Never emit "
       "bias= (C16, decompose adds an add); weight must be a const (dynamic weights lower to the matmul idiom); "
       "kernel width <= 15 (C24); input channels > 8,192 are split (C25); all five parameters emitted as named "
       "consts",
       attrs={"dilations": (1, 1), "groups": 1, "pad": (0, 0, 0, 0), "pad_type": "valid", "strides": (1, 1)})


def _pair(v, what):
    t = (v, v) if isinstance(v, int) else tuple(int(e) for e in v)
    if len(t) != 2:
        raise GraphError(f"conv: {what} must be an int or a pair, got {v!r}")
    return t


@builder
def conv(x: Value, weight, bias=None, strides=1, pad_type="valid", pad=(0, 0, 0, 0), dilations=1, groups=1,
         name=None) -> Value:
    """2-D convolution; ``weight`` [Cout, Cin/groups, kH, kW] (an array becomes a weight const)."""
    if x.rank != 4:                   # the simulator also runs 1-D convs; the IR's reference is 2-D
        raise GraphError(f"conv: x must be [N, Cin, H, W] (rank 4), got {x!r}")
    if pad_type not in ("valid", "same", "custom"):
        raise GraphError(f"conv: pad_type must be 'valid', 'same' or 'custom', got {pad_type!r}")
    inputs = {"x": x, "weight": as_value(weight, x, "conv weight")}
    if bias is not None:
        inputs["bias"] = as_value(bias, x, "conv bias")
    attrs = {"strides": _pair(strides, "strides"), "dilations": _pair(dilations, "dilations"),
             "pad_type": pad_type, "pad": tuple(int(p) for p in pad), "groups": int(groups)}
    if len(attrs["pad"]) != 4:
        raise GraphError(f"conv: pad must be [top, bottom, left, right], got {pad!r}")
    return make("conv", inputs, attrs, name=name)


def _ev_matmul(i, a):
    x, y = i["x"], i["y"]
    if a["transpose_x"] and x.ndim > 1:           # a rank-1 operand is not transposed (numpy / MIL)
        x = np.swapaxes(x, -1, -2)
    if a["transpose_y"] and y.ndim > 1:
        y = np.swapaxes(y, -1, -2)
    return [np.matmul(x, y)]


define("matmul", _ev_matmul,
       "batched, broadcasting over leading axes; transpose flags must be named bool consts (C15); outputs saturate "
       "near +-32,752 (C36); disputed on M1/M2 (C30)", attrs={"transpose_x": False, "transpose_y": False})


@builder
def matmul(x: Value, y, transpose_x: bool = False, transpose_y: bool = False, name=None) -> Value:
    if not isinstance(x, Value):
        x = as_value(x, y, "matmul x")
    return make("matmul", {"x": x, "y": as_value(y, x, "matmul y")},
                {"transpose_x": bool(transpose_x), "transpose_y": bool(transpose_y)}, name=name)


def _ev_sdpa(i, a):
    q, k, v = i["query"], i["key"], i["value"]
    s = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if "attn_mask" in i:
        s = s + i["attn_mask"]
    return [np.matmul(_softmax(s, -1), v)]


define("scaled_dot_product_attention", _errstate(_ev_sdpa),
       "iOS18 only; attn_mask is ignored on the ANE (C06) and fused SDPA is unreliable (C45)")


@builder
def scaled_dot_product_attention(query: Value, key: Value, value: Value, attn_mask=None, name=None) -> Value:
    inputs = {"query": query, "key": key, "value": value}
    if attn_mask is not None:
        inputs["attn_mask"] = as_value(attn_mask, query, "attn_mask")
    return make("scaled_dot_product_attention", inputs, name=name)
