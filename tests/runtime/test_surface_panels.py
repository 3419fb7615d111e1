"""A surface's panels (``Surface.set_panels``): compressed weights standing for a weight input's bytes in its column
panels, which the simulator's panel GEMMs read themselves - a shared layer program's streamed weights, never decoded
into an fp16 copy. The product is bit for bit the one of the decoded bytes (whole, live prefixes, the int8 GEMV);
a program that reads the input any other way, or panels that do not cover what it reads, get the bytes decoded into
the surface first; bad parts are refused."""

from __future__ import annotations

import numpy as np
import pytest

import orion
from orion import _native
from orion.models.streamed import native_weight
from orion.quant import QuantizedArray, palettize, quantize_blockwise, quantize_int8
from runtime_programs import HEADER, t

K, W, S = 64, 32, 16
ROWS = (256, 128)                        # two weights packed along the panel axis, as a shared program's qkv are
SCHEMES = {"int8": quantize_int8, "lut4": lambda w: palettize(w, 4, group_size=16),
           "int4": lambda w: quantize_blockwise(w, 4, block_size=8)}


def _program(extra_reader: bool = False) -> str:
    """ya, yb = the two weights' panels (slices of input ``w``) transposed times x: the panel idiom of
    compiler/passes/dynamic_weights.py; ``extra_reader``: also returns w + w (a reader that needs the bytes)."""
    P = sum(ROWS) // W
    lines = [f"    func main<ios18>({t('fp16', (1, P, K, W))} w, {t('fp16', (1, 1, K, S))} x) {{",
             '        bool tx = const()[name = string("tx"), val = bool(true)];',
             '        bool ty = const()[name = string("ty"), val = bool(false)];']
    p0 = 0
    for name, rows in zip("ab", ROWS):
        p = rows // W
        lines += [f'        tensor<int32, [4]> {name}_begin = const()[name = string("{name}_begin"), '
                  f'val = tensor<int32, [4]>([0, {p0}, 0, 0])];',
                  f'        tensor<int32, [4]> {name}_size = const()[name = string("{name}_size"), '
                  f'val = tensor<int32, [4]>([1, {p}, {K}, {W}])];',
                  f'        {t("fp16", (1, p, K, W))} w{name} = slice_by_size(begin = {name}_begin, size = {name}_size, '
                  f'x = w)[name = string("w{name}")];',
                  f'        {t("fp16", (1, p, W, S))} y{name} = matmul(transpose_x = tx, transpose_y = ty, x = w{name}, '
                  f'y = x)[name = string("y{name}")];']
        p0 += p
    outs = "ya, yb"
    if extra_reader:
        lines.append(f'        {t("fp16", (1, P, K, W))} ww = add(x = w, y = w)[name = string("ww")];')
        outs += ", ww"
    lines.append(f"    }} -> ({outs});\n}}\n")
    return HEADER + "\n".join(lines)


def _weights(scheme: str):
    """Each weight's native form, its byte offset in ``w`` and ``w``'s decoded bytes [1, P, K, W]."""
    rng = np.random.default_rng(3)
    parts, panels = [], []
    offset = 0
    for rows in ROWS:
        q = SCHEMES[scheme]((rng.standard_normal((rows, K)) * 0.05).astype(np.float16))
        cw = native_weight(QuantizedArray(q))
        dense = q.dequantize()                                         # the constexpr op's values
        panels.append(dense.reshape(rows // W, W, K).transpose(0, 2, 1))
        parts.append((cw, offset, W, W))
        offset += rows * K * 2
    return parts, np.concatenate(panels)[None]


def _x():
    return (np.random.default_rng(4).standard_normal((1, 1, K, S))).astype(np.float16)


def _run(prog, surface, live=None) -> dict:
    prog.bind_input("w", surface)
    prog.stage("x", _x())
    prog.eval(live_columns=live)
    return {n: prog.read_output(n) for n in ("ya", "yb")}


def _decoded_surface(prog, panels):
    s = prog.new_surface(prog.input_surface("w").alloc_size)
    s.view("fp16", list(panels.shape))[...] = panels
    return s


def _bits(a):
    return np.asarray(a).view(np.uint16)


@pytest.mark.parametrize("scheme", sorted(SCHEMES))
@pytest.mark.parametrize("live", [None, 1, 5])
def test_panels_give_the_product_of_the_decoded_bytes_and_leave_the_bytes_untouched(scheme, live):
    prog = orion.compile_mil(_program(), device="sim")
    parts, panels = _weights(scheme)
    want = _run(prog, _decoded_surface(prog, panels), live)
    assert prog._p.reads_panels(prog._p.input_slot("w"))
    s = _native.Surface(prog.input_surface("w").alloc_size, mapped=True)
    s.set_panels(parts)
    got = _run(prog, s, live)
    cols = S if live is None else live
    for n in want:
        assert np.array_equal(_bits(got[n])[..., :cols], _bits(want[n])[..., :cols]), n
    assert s.resident_bytes == 0 and s.panel_count == 2            # read from the weights: no page written


def test_a_program_that_reads_the_bytes_gets_them_decoded_first():
    prog = orion.compile_mil(_program(extra_reader=True), device="sim")
    assert not prog._p.reads_panels(prog._p.input_slot("w"))
    parts, panels = _weights("int8")
    s = _native.Surface(prog.input_surface("w").alloc_size, mapped=True)
    s.set_panels(parts)
    prog.bind_input("w", s)
    prog.stage("x", _x())
    prog.eval()
    assert np.array_equal(_bits(prog.read_output("ww")), _bits(panels + panels))
    assert np.array_equal(_bits(s.view("fp16", list(panels.shape))), _bits(panels))
    ref = orion.compile_mil(_program(), device="sim")
    want = _run(ref, _decoded_surface(ref, panels))
    assert np.array_equal(_bits(prog.read_output("ya")), _bits(want["ya"]))


def test_panels_that_miss_a_read_are_decoded_into_the_bytes():
    prog = orion.compile_mil(_program(), device="sim")
    parts, panels = _weights("lut4")
    want = _run(prog, _decoded_surface(prog, panels))
    s = _native.Surface(prog.input_surface("w").alloc_size, mapped=True)
    s.view("fp16", list(panels.shape))[0, ROWS[0] // W:] = panels[0, ROWS[0] // W:]   # the second weight as bytes
    s.set_panels(parts[:1])                                          # only the first has a part
    got = _run(prog, s)
    assert all(np.array_equal(_bits(got[n]), _bits(want[n])) for n in want)


def test_bad_parts_are_refused():
    parts, _ = _weights("int8")
    cw, _, _, _ = parts[0]
    need = cw.shape[0] * cw.shape[1] * 2
    s = _native.Surface(need, mapped=True)
    for bad in ([(cw, 2, W, W)], [(cw, 0, 24, 24)], [(cw, 0, W, 16)], [(cw, -2, W, W)],
                [(cw, 0, W, W), (cw, 64, W, W)], [(cw, 0)], [("w", 0, W, W)]):
        with pytest.raises(orion.InputError, match="set_panels|surface panels"):
            s.set_panels(bad)
    s.set_panels([(cw, 0, W, W)])
    assert s.panel_count == 1
    s.set_panels([])
    assert s.panel_count == 0


def test_zero_gives_a_mapped_surfaces_pages_back():
    s = _native.Surface(1 << 21)
    v = s.view("fp16", [1 << 20])
    v[:] = 1
    assert s.resident_bytes == 1 << 21
    s.zero()
    assert s.resident_bytes == 0 and not s.view("uint8", [1 << 21]).any()
    small = _native.Surface(4096)
    small.view("uint8", [4096])[:] = 7
    small.zero()
    assert not small.view("uint8", [4096]).any()


def test_products_past_fp16s_range_saturate_and_warn_as_from_the_bytes():
    """C36 on a weight read from its panels: the same +-inf results and the same warning as from the bytes."""
    prog = orion.compile_mil(_program(), device="sim")
    parts, panels = _weights("int8")
    big = np.full((1, 1, K, S), 30000, np.float16)                  # sums of 64 products up to ~1e5
    got = {}
    for name, surface in (("bytes", _decoded_surface(prog, panels)), ("panels", None)):
        if surface is None:
            surface = _native.Surface(prog.input_surface("w").alloc_size, mapped=True)
            surface.set_panels(parts)
        prog.bind_input("w", surface)
        prog.stage("x", big)
        with pytest.warns(orion.AneSimWarning, match="C36"):
            prog.eval(live_columns=1)
        got[name] = {n: prog.read_output(n)[..., :1] for n in ("ya", "yb")}
    assert any(np.isinf(got["panels"][n]).any() for n in got["panels"])
    assert all(np.array_equal(_bits(got["panels"][n]), _bits(got["bytes"][n])) for n in got["bytes"])
