"""pipeline: ordered, configurable, with per-pass timings and statistics."""

from __future__ import annotations

import pytest

from orion.compiler import lower
from orion.errors import CompileError
from orion.ir import Graph, ops
from orion.compiler.passes import DEFAULT_PIPELINE, PASSES, default_pipeline


def _g():
    g = Graph()
    x = g.input("x", (1, 768, 1, 32))
    g.output("y", ops.gelu(ops.mul(x, 1.0)))
    return g


def test_default_order():
    assert DEFAULT_PIPELINE[0] == "check_weights" and DEFAULT_PIPELINE[-1] == "validate"
    assert DEFAULT_PIPELINE.index("decompose") < DEFAULT_PIPELINE.index("io_legalize") < \
        DEFAULT_PIPELINE.index("names") < DEFAULT_PIPELINE.index("budget")
    assert set(DEFAULT_PIPELINE) == set(PASSES)


def test_the_pipeline_is_the_one_list_of_passes():
    """Every module of orion.compiler.passes with a ``run`` is a pass of the pipeline, registered under its name in the
    pipeline's order (a pass module left out of DEFAULT_PIPELINE, or a second list, fails here)."""
    import importlib
    import pkgutil

    import orion.compiler.passes
    modules = [m.name for m in pkgutil.iter_modules(orion.compiler.passes.__path__)]
    with_run = {m for m in modules
                if callable(getattr(importlib.import_module(f"orion.compiler.passes.{m}"), "run", None))}
    assert list(PASSES) == list(dict.fromkeys(DEFAULT_PIPELINE))
    assert with_run == set(PASSES)
    assert all(PASSES[m] is importlib.import_module(f"orion.compiler.passes.{m}").run for m in PASSES)


def test_stats_and_timings():
    low = lower(_g())
    assert set(low.stats["time_ms"]) >= set(DEFAULT_PIPELINE) | {"codegen", "total"}
    assert low.stats["decompose"]["gelu"] == 1 and low.stats["identity_elim"]["mul"] == 1


def test_custom_pass_and_removal():
    seen = []

    def spy(graph, ctx):
        seen.append([n.op for n in graph.nodes])
    pipe = default_pipeline()
    pipe.insert(pipe.index("decompose") + 1, spy)
    pipe.remove("identity_elim")
    lower(_g(), pipeline=pipe)
    assert "tanh" in seen[0] and "gelu" not in seen[0]


def test_unknown_pass():
    with pytest.raises(CompileError, match="unknown pass 'nope'"):
        lower(_g(), pipeline=["nope"])


def test_unknown_option():
    with pytest.raises(CompileError, match="unknown compile option"):
        lower(_g(), weight_layuot="multi")
