"""Helpers for the compiler tests: running graphs through the simulator, the float64 reference, and
applying single passes for before/after checks."""

from __future__ import annotations

import numpy as np
import pytest

from orion.ir import Graph, evaluate
from orion.compiler.passes import CompileContext, CompileOptions, PASSES
from orion.compiler.program import CompiledProgram

FP16_EPS = 2.0 ** -10


def assert_fp16_close(got, ref, rtol=4 * FP16_EPS, atol=1e-3, scale=None):
    """|got - ref| <= atol + rtol * max(|ref|, scale) elementwise (``scale`` defaults to max |ref|/8:
    errors of intermediate fp16 roundings scale with the magnitudes flowing through the graph)."""
    got = np.asarray(got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"shape {got.shape} != {ref.shape}"
    if scale is None:
        scale = float(np.max(np.abs(ref))) / 8 if ref.size else 0.0
    bound = atol + rtol * np.maximum(np.abs(ref), scale)
    err = np.abs(got - ref)
    ok = (err <= bound) | (np.isnan(ref) & np.isnan(got)) | ((ref == got) & np.isinf(ref))
    if not ok.all():
        i = int(np.argmax(np.where(ok, 0, err - bound)))
        raise AssertionError(f"{int((~ok).sum())} of {ok.size} elements out of tolerance; worst at {i}: "
                             f"got {got.flat[i]!r}, ref {ref.flat[i]!r}, bound {bound.flat[i]:.3g}")


def sim_compile(graph: Graph, chip: str = "m4", strictness: str = "strict", **kw) -> CompiledProgram:
    """Compile ``graph`` for the simulator through orion.compile (a broken build fails, never skips)."""
    from orion.compiler import compile as compile_graph
    from orion.native.sim import Profile
    return compile_graph(graph, device="sim", profile=Profile(chip=chip, strictness=strictness), **kw)


def run_sim(graph: Graph, inputs: dict, **kw) -> dict:
    prog = sim_compile(graph, **kw)
    try:
        return prog(**inputs)
    finally:
        prog.release()


def reference_program(lowered, inputs: dict) -> dict:
    """Run a lowered program's post-pass graph in float64 through its I/O plan (no simulator): checks
    that padding, widening, splitting and their inversion on the host are exact."""
    feed = {}
    for name, b in lowered.io.inputs.items():
        if b.kind == "activation":
            arr = np.asarray(inputs[name], np.float64)
            feed[b.key] = np.zeros(b.mil_shape)
            feed[b.key][tuple(slice(0, d) for d in arr.shape)] = arr       # pad in float64 (no fp16 rounding)
    for dname, dw in lowered.io.dynamic.items():
        b = lowered.io.inputs[dw.input_key]
        surf = dw.to_surface(dw.initial)
        if b.key not in feed:
            feed[b.key] = np.zeros(b.mil_shape)
        idx = tuple(slice(0, d) for d in surf.shape[:-1]) + (slice(dw.offset, dw.offset + surf.shape[-1]),)
        feed[b.key][idx] = surf
    raw = evaluate(lowered.graph, feed)
    out = {}
    for name, ob in lowered.io.outputs.items():
        pieces = [p.from_surface(raw[p.key]) for p in ob.parts]
        out[name] = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=ob.concat_axis)
    return out


def apply_passes(graph: Graph, *names: str, **options):
    """Clone ``graph`` and run the named passes on it; returns (graph, ctx)."""
    g = graph.clone()
    ctx = CompileContext(g, CompileOptions(**options))
    for n in names:
        PASSES[n](g, ctx)
    return g, ctx


def ops_of(graph: Graph) -> list[str]:
    return [n.op for n in graph.nodes if n.op not in ("input", "const")]



def same_result(before: Graph, after: Graph) -> None:
    """A pass kept the float64 meaning of every output (random inputs)."""
    a = {k: np.random.default_rng(2).standard_normal(v.shape) for k, v in before.inputs.items()}
    r0, r1 = evaluate(before, a), evaluate(after, a)
    for k in r0:
        np.testing.assert_allclose(r1[k], r0[k], rtol=1e-6, atol=1e-7, equal_nan=True)


@pytest.fixture
def rng():
    """Seeded generator (import this fixture into a test module: ``from compiler_helpers import rng``)."""
    return np.random.default_rng(1234)
