"""Where a loaded model's memory is (:meth:`orion.models.Model.memory`): the bytes the host side can count,
by kind, next to the process's resident set. What the native runtime holds inside compiled programs
(baked weights as the plan keeps them, packed panels, scratch) is not enumerable from Python: it is in
``other``, the resident set minus everything counted (with the interpreter and libraries)."""

from __future__ import annotations

import os

import numpy as np

__all__ = ["memory_report", "process_rss"]


def process_rss() -> int | None:
    """This process's resident set in bytes (Linux: /proc/self/statm; None where it cannot be read)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _surface_key(surface) -> int:
    """One surface however many Python wrappers name it: the address of its bytes."""
    return surface.view("uint8").__array_interface__["data"][0]


def _programs(engine) -> list:
    """Every program's (runtime program, compiled program) and every shared stage's layer caches, over all
    the program sets the engine holds (prefill/decode, batched, classifier)."""
    stages = [st for sts in engine.sets.values() for st in sts]
    stages += [st for _, sts in engine.batch_sets.values() for st in sts]
    stages += [st for parts in engine.cls_sets.values() for *_, st in parts]
    progs, caches = [], []
    for st in stages:
        for one in getattr(st, "parts", None) or [st]:       # a SplitStage runs several programs
            caches += list(getattr(one, "caches", {}).values())
            one = getattr(one, "base", one)                  # a LayerStage runs its shared program
            progs.append((one.prog, one.cp))
    return progs, caches


def memory_report(model) -> dict[str, int | None]:
    """Bytes by kind (see :meth:`orion.models.Model.memory`)."""
    weights = sum(int(np.asarray(a).nbytes) for a in model.weights.values())
    compressed = sum(int(getattr(getattr(a, "quant", None), "nbytes", 0) or 0) for a in model.weights.values())
    out = {"weights": weights, "weights_compressed": compressed, "layer_weight_surfaces": 0, "kv_cache": 0,
           "program_surfaces": 0, "classifier_panels": 0}
    eng = model._engine
    if eng is not None:
        seen: set[int] = set()

        def count(kind: str, surface) -> None:
            key = _surface_key(surface)
            if key not in seen:
                seen.add(key)
                out[kind] += int(surface.alloc_size)

        for layer in eng._layer_surf.values():
            for s in layer.values():
                count("layer_weight_surfaces", s)
        progs, caches = _programs(eng)
        for s in caches:                                     # shared stages: each layer's own cache
            count("kv_cache", s)
        for prog, cp in progs:
            for b in cp.io_plan.inputs.values():
                count("kv_cache" if b.name in ("k_cache", "v_cache") else "program_surfaces",
                      prog.input_surface(b.mil_name))
            for o in cp.io_plan.outputs.values():
                for part in o.parts:
                    count("program_surfaces", prog.output_surface(part.mil_name))
        if eng._wcls is not None:
            out["classifier_panels"] = int(np.asarray(eng._wcls).nbytes)
    counted = sum(v for k, v in out.items() if k != "weights_compressed")
    rss = process_rss()
    out.update(counted=counted, process_rss=rss, other=None if rss is None else rss - counted)
    return out
