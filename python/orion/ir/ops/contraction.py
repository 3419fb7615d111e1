"""Contractions: conv (the workhorse — a linear layer is a 1x1 conv, C46), matmul and
scaled_dot_product_attention."""

from __future__ import annotations

import math

import numpy as np

from ..graph import GraphError, Value
from ._core import _errstate, _fmt, _same_float, as_value, broadcast_shapes, builder, define, make
from .activation import _softmax


def _infer_conv(i, a):
    x, w = i["x"], i["weight"]
    dt = _same_float("conv", x=x, weight=w)
    if x.rank != 4 or w.rank != 4:
        raise GraphError(f"conv: expects x [N, Cin, H, W] and weight [Cout, Cin/groups, kH, kW] (rank 4), got "
                         f"{_fmt(x=x, weight=w)}")
    g = a["groups"]
    n, cin, h, wd = x.shape
    cout, cpg, kh, kw = w.shape
    if g < 1 or cin % g or cout % g or cin // g != cpg:
        raise GraphError(f"conv: {_fmt(x=x, weight=w)} with groups={g}: weight axis 1 must be Cin/groups = "
                         f"{cin // max(g, 1)} and Cin, Cout divisible by groups")
    if "bias" in i:
        b = i["bias"]
        if b.size != cout:
            raise GraphError(f"conv: bias{list(b.shape)} must have Cout = {cout} elements")
    sh, sw = a["strides"]
    dh, dw = a["dilations"]
    if a["pad_type"] == "same":
        oh, ow = -(-h // sh), -(-wd // sw)
    else:
        pt, pb, pl, pr = a["pad"] if a["pad_type"] == "custom" else (0, 0, 0, 0)
        oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
        ow = (wd + pl + pr - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise GraphError(f"conv: kernel {kh}x{kw} does not fit input {list(x.shape)} (output would be {oh}x{ow})")
    return [((n, cout, oh, ow), dt)]


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
                y[:, gi * opg:(gi + 1) * opg] += np.einsum("oc,nchw->nohw", ws[:, :, r, c], patch)
    if "bias" in i:
        y = y + i["bias"].reshape(1, cout, 1, 1)
    return [y]


define("conv", _infer_conv, _ev_conv,
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


def _infer_matmul(i, a):
    x, y = i["x"], i["y"]
    dt = _same_float("matmul", x=x, y=y)
    if x.rank < 2 or y.rank < 2:
        raise GraphError(f"matmul: operands need rank >= 2, got {_fmt(x=x, y=y)}")
    xm, xk = (x.shape[-1], x.shape[-2]) if a["transpose_x"] else (x.shape[-2], x.shape[-1])
    yk, yn = (y.shape[-1], y.shape[-2]) if a["transpose_y"] else (y.shape[-2], y.shape[-1])
    if xk != yk:
        raise GraphError(f"matmul: contraction sizes differ: {_fmt(x=x, y=y)} with transpose_x={a['transpose_x']}, "
                         f"transpose_y={a['transpose_y']} contracts {xk} with {yk}")
    batch = broadcast_shapes("matmul (batch axes)", x.shape[:-2], y.shape[:-2])
    return [(batch + (xm, yn), dt)]


def _ev_matmul(i, a):
    x, y = i["x"], i["y"]
    if a["transpose_x"]:
        x = np.swapaxes(x, -1, -2)
    if a["transpose_y"]:
        y = np.swapaxes(y, -1, -2)
    return [np.matmul(x, y)]


define("matmul", _infer_matmul, _ev_matmul,
       "batched, broadcasting over leading axes; transpose flags must be named bool consts (C15); outputs saturate "
       "near +-32,752 (C36); disputed on M1/M2 (C30)", attrs={"transpose_x": False, "transpose_y": False})


@builder
def matmul(x: Value, y, transpose_x: bool = False, transpose_y: bool = False, name=None) -> Value:
    if not isinstance(x, Value):
        x = as_value(x, y, "matmul x")
    return make("matmul", {"x": x, "y": as_value(y, x, "matmul y")},
                {"transpose_x": bool(transpose_x), "transpose_y": bool(transpose_y)}, name=name)


def _infer_sdpa(i, a):
    q, k, v = i["query"], i["key"], i["value"]
    dt = _same_float("scaled_dot_product_attention", query=q, key=k, value=v)
    if q.rank < 3 or q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise GraphError(f"scaled_dot_product_attention: expects query [..., L, E], key [..., S, E], value "
                         f"[..., S, Ev]; got {_fmt(query=q, key=k, value=v)}")
    batch = broadcast_shapes("sdpa (batch axes)", q.shape[:-2], k.shape[:-2])
    batch = broadcast_shapes("sdpa (batch axes)", batch, v.shape[:-2])
    if "attn_mask" in i:
        broadcast_shapes("sdpa (attn_mask)", batch + (q.shape[-2], k.shape[-2]), i["attn_mask"].shape,
                         names=("scores", "attn_mask"))
    return [(batch + (q.shape[-2], v.shape[-1]), dt)]


def _ev_sdpa(i, a):
    q, k, v = i["query"], i["key"], i["value"]
    s = np.matmul(q, np.swapaxes(k, -1, -2)) / math.sqrt(q.shape[-1])
    if "attn_mask" in i:
        s = s + i["attn_mask"]
    return [np.matmul(_softmax(s, -1), v)]


define("scaled_dot_product_attention", _infer_sdpa, _errstate(_ev_sdpa),
       "iOS18 only; attn_mask is ignored on the ANE (C06) and fused SDPA is unreliable (C45)")


@builder
def scaled_dot_product_attention(query: Value, key: Value, value: Value, attn_mask=None, name=None) -> Value:
    inputs = {"query": query, "key": key, "value": value}
    if attn_mask is not None:
        inputs["attn_mask"] = as_value(attn_mask, query, "attn_mask")
    return make("scaled_dot_product_attention", inputs, name=name)
