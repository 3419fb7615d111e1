"""The pass pipeline: an ordered, configurable list of named passes.

    decompose → dynamic_weights → constant_fold → identity_elim → cast_fusion → cse → dce
    → limits → io_legalize → identity_elim → dce → names → budget → validate

``compile(graph, pipeline=[...])`` takes names and/or callables ``fn(graph, ctx)``; ``default_pipeline()``
returns the list above to edit (e.g. drop ``"cse"``, or insert a custom pass).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Union

from ..ir.graph import Graph
from . import (budget, cast_fusion, check_weights, constant_fold, cse, dce, decompose, dynamic_weights,
               identity_elim, io_legalize, limits, names, validate)
from .context import CompileContext

Pass = Callable[[Graph, CompileContext], None]

PASSES: dict[str, Pass] = {
    "check_weights": check_weights.run,
    "decompose": decompose.run,
    "dynamic_weights": dynamic_weights.run,
    "constant_fold": constant_fold.run,
    "identity_elim": identity_elim.run,
    "cast_fusion": cast_fusion.run,
    "cse": cse.run,
    "dce": dce.run,
    "limits": limits.run,
    "io_legalize": io_legalize.run,
    "names": names.run,
    "budget": budget.run,
    "validate": validate.run,
}

DEFAULT_PIPELINE = (
    "check_weights", "decompose", "dynamic_weights", "constant_fold", "identity_elim", "cast_fusion", "cse",
    "dce", "limits", "io_legalize", "identity_elim", "dce", "names", "budget", "validate",
)


def default_pipeline() -> list[str]:
    return list(DEFAULT_PIPELINE)


def resolve(pipeline: Iterable[Union[str, Pass]] | None) -> list[tuple[str, Pass]]:
    out = []
    for p in (DEFAULT_PIPELINE if pipeline is None else pipeline):
        if callable(p):
            out.append((getattr(p, "__name__", "custom"), p))
        elif p in PASSES:
            out.append((p, PASSES[p]))
        else:
            from ..errors import CompileError
            raise CompileError(f"unknown pass {p!r}; known passes: {', '.join(PASSES)}")
    if "names" not in [n for n, _ in out]:
        out.append(("names", PASSES["names"]))   # the codegen needs MIL names
    return out


def run_pipeline(graph: Graph, ctx: CompileContext, pipeline=None) -> None:
    for name, fn in resolve(pipeline):
        t = time.perf_counter()
        fn(graph, ctx)
        ctx.stats.setdefault("time_ms", {})[name] = (ctx.stats.get("time_ms", {}).get(name, 0.0)
                                                     + (time.perf_counter() - t) * 1e3)
