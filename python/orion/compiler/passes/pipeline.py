"""The pass pipeline: an ordered, configurable list of named passes (:data:`DEFAULT_PIPELINE`, the one list
of them: the registry :data:`PASSES` is built from it).

``compile(graph, pipeline=[...])`` takes names and/or callables ``fn(graph, ctx)``; ``default_pipeline()``
returns the default list to edit (e.g. drop ``"cse"``, or insert a custom pass).
"""

from __future__ import annotations

import importlib
import time
from typing import Callable, Iterable, Union

from ...errors import CompileError
from ...ir.graph import Graph
from .context import CompileContext

Pass = Callable[[Graph, CompileContext], None]

# Each pass is the ``run(graph, ctx)`` of the module of this package named like it.
DEFAULT_PIPELINE = (
    "check_weights", "decompose", "dynamic_weights", "constant_fold", "identity_elim", "cast_fusion", "cse",
    "dce", "limits", "io_legalize", "identity_elim", "dce", "names", "budget", "validate",
)

# name -> pass, in first-use order; imported by name so that adding a pass is one entry above
PASSES: dict[str, Pass] = {name: importlib.import_module(f".{name}", __package__).run
                           for name in dict.fromkeys(DEFAULT_PIPELINE)}


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
