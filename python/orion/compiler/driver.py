"""``orion.compile(graph)``: Graph → passes → MIL text + weight files → runtime Program.

``lower()`` stops before the runtime (MIL text, weight dictionary and the I/O plan) — what the
benchmarks and text-level tests use; ``compile()`` hands the result to ``orion.compile_mil`` and wraps
the loaded program in a :class:`~orion.compiler.program.CompiledProgram` that speaks the graph's names.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import CompileError
from ..ir import display
from ..ir.graph import Graph, GraphError
from ..native.runtime import compile_mil, devices, resolve_device
from ..native.sim import dialect_for, get_profile
from .codegen import build_weights, emit
from .lowered import Lowered
from .passes.context import CompileContext, CompileOptions
from .passes.pipeline import run_pipeline
from .program import CompiledProgram

__all__ = ["compile", "check", "lower", "Lowered"]


def lower(graph: Graph, *, target: str = "ios18", chip: str | None = None, pipeline=None, dynamic_weights=None,
          **options: Any) -> Lowered:
    """Run the pass pipeline and the codegen on a copy of ``graph`` (the caller's graph is not modified).

    Options are the fields of :class:`~orion.compiler.passes.CompileOptions` (``weight_layout``,
    ``pack_dynamic_weights``, ``non_finite``, ``allow_concat``, ``min_surface_bytes``, ...)."""
    if not isinstance(graph, Graph):
        raise GraphError(f"compile expects an orion.ir.Graph, got {type(graph).__name__}")
    if not graph.outputs:
        raise GraphError(f"graph {graph.name!r} has no outputs; declare them with g.output(name, value)")
    graph.topo_check()
    t0 = time.perf_counter()
    if options.get("weight_layout") is None:
        options["weight_layout"] = "per_tensor" if target == "ios16" else "multi"   # C32
    if options.get("count_weight_tensors") is None:
        options["count_weight_tensors"] = False
    try:
        opts = CompileOptions(target=target, chip=chip, dynamic_weights=dynamic_weights, **options)
    except TypeError as e:
        raise CompileError(f"unknown compile option: {e}") from None
    g = graph.clone()
    ctx = CompileContext(g, opts)
    run_pipeline(g, ctx, pipeline)
    t1 = time.perf_counter()
    wf = build_weights(g, opts.weight_layout)
    ctx.stats["weight_bytes"] = wf.nbytes          # survives drop_weight_files (Model.weight_bytes)
    text = emit(g, ctx, wf)
    ctx.stats["time_ms"]["codegen"] = (time.perf_counter() - t1) * 1e3
    ctx.stats["time_ms"]["total"] = (time.perf_counter() - t0) * 1e3
    return Lowered(text, wf.files, ctx.io, opts, g, ctx.stats, ctx.warnings)


def _resolve_target(device: str, target: str | None, profile) -> tuple[str, str | None]:
    if device == "sim":
        chip = profile.chip
    else:
        ane = next((d for d in devices() if d.get("name") == "ane"), {})
        chip = ane.get("chip")
    if target is None:
        target = dialect_for(chip)
    return target, chip


def _lower_for(graph: Graph, device: str, target, pipeline, dynamic_weights, profile, options: dict):
    """(device, target, Lowered): the pass pipeline and codegen as :func:`compile` runs them for ``device``
    (its dialect, and C18 counted as the simulator profile counts it); ``options`` is completed in place."""
    dev = resolve_device(device)
    prof = profile or get_profile()
    target, chip = _resolve_target(dev, target, prof)
    if options.get("count_weight_tensors") is None:
        options["count_weight_tensors"] = dev == "sim" and prof.strictness == "strict"   # C18 as simulated
    return dev, target, lower(graph, target=target, chip=chip, pipeline=pipeline, dynamic_weights=dynamic_weights,
                              **options)


def check(graph: Graph, device: str = "auto", target: str | None = None, *, profile=None, **options: Any) -> Lowered:
    """What :func:`compile` does before the device sees the program - the passes and every compile-time
    check they make (C18's weight budget included) - without compiling: no compile budget (C05) is
    charged. Raises the same :class:`~orion.errors.CompileError`; returns the lowered program."""
    return _lower_for(graph, device, target, None, None, profile, dict(options))[2]


def compile(graph: Graph, device: str = "auto", target: str | None = None, pipeline=None, dynamic_weights=None,
            *, profile=None, **options: Any):  # noqa: A001 - the public name is orion.compile
    """Compile ``graph`` for the ANE (``device="ane"``), its simulator (``"sim"``) or whichever exists
    (``"auto"``). ``target`` picks the MIL dialect (default: ios16 on M1/M2, else ios18).
    ``dynamic_weights``: True (every weight) or weight names to pass as program inputs.
    Returns a :class:`~orion.compiler.program.CompiledProgram`."""
    dev, target, lowered = _lower_for(graph, device, target, pipeline, dynamic_weights, profile, options)
    prog = compile_mil(lowered.mil, lowered.weights, device=dev, profile=profile)
    return CompiledProgram(prog, lowered, source=graph, compile_fn=compile,
                           recompile_args=dict(device=dev, target=target, pipeline=pipeline,
                                               dynamic_weights=dynamic_weights, profile=profile, **options))


# A graph's notebook view shows the compiler's notes; the IR cannot import the compiler, so it is handed in
# (looked up at call time, so a patched orion.compiler.driver.lower is the one used).
display.set_lowering(lambda graph: lower(graph))
