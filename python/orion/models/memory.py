"""Where a loaded model's memory is (:meth:`orion.models.Model.memory`): the bytes the host side can count,
by kind, next to the process's resident set. What the native runtime holds inside compiled programs
(baked weights as the plan keeps them, packed panels, scratch) is not enumerable from Python: it is in
``other``, the resident set minus everything counted (with the interpreter and libraries)."""

from __future__ import annotations

import os

import numpy as np

from .. import _native
from ..compiler.driver import check
from ..errors import InputError
from ..native.runtime import resolve_device
from ..quant import QuantizedArray
from . import classifier as cpu_classifier
from . import host_pages
from .engine import AS_INPUTS, DECODE_S
from .layer_params import take_stored
from .stages import CACHE_INPUTS, cache_copied_in, fed_per_eval, streamable

__all__ = ["PLAN_NEW", "PLAN_PROMPT", "memory_plan", "memory_report", "process_rss"]

#: the first generation :func:`memory_plan` estimates the programs of: its prompt and new tokens
PLAN_PROMPT, PLAN_NEW = 64, 32


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


def _programs(engine) -> tuple[list, list, list, set, list]:
    """Every program's (runtime program, compiled program), every shared stage's layer caches - the surfaces
    bound per layer, the host arrays copied in (stages.cache_copied_in) -, the program surfaces those are
    copied into, and the shared programs' own surfaces of streamed inputs (bound or not: a layer reading its
    weights from panels binds its own), over all the program sets the engine holds (prefill/decode, batched,
    classifier)."""
    stages = [st for sts in engine.sets.values() for st in sts]
    stages += [st for _, sts in engine.batch_sets.values() for st in sts]
    stages += [st for parts in engine.cls_sets.values() for *_, st in parts]
    progs, caches, held, targets, own = [], [], [], set(), []
    for st in stages:
        for one in getattr(st, "parts", None) or [st]:       # a SplitStage runs several programs
            caches += list(getattr(one, "caches", {}).values())
            held += list(getattr(one, "host_caches", {}).values())
            targets |= {_surface_key(one.base.prog.input_surface(n)) for n in getattr(one, "host_caches", {})}
            one = getattr(one, "base", one)                  # a LayerStage runs its shared program
            progs.append((one.prog, one.cp))
            own += list(getattr(one, "own_surfaces", {}).values())
    return progs, caches, held, targets, own


def _host_weights(model, resident: bool = True) -> dict[str, int]:
    """The kinds every model holds before any program: its weights as stored (a QuantizedArray: its
    compressed bytes), of which compressed, of which resident in this process now (views of a mapped cache
    file - the weight cache's, the compressed-weight cache's: the pages resident, host_pages;
    ``resident=False``: none of them, as after the programs took them), and zero for the program-side kinds."""
    ws = list(model.weights.values())
    maps = host_pages.file_maps(ws)
    anon = sum(int(a.nbytes) for a in ws if not isinstance(a, (np.ndarray, QuantizedArray)))   # other array types
    anon += sum(int(p.nbytes) for a in ws for p in host_pages.backing_arrays(a) if host_pages.map_of(p) is None)
    held = sum((host_pages.resident_bytes(m) if resident else 0) or 0 for m in maps)
    return {"weights": sum(int(a.nbytes) for a in ws),
            "weights_compressed": sum(int(a.nbytes) for a in ws if isinstance(a, QuantizedArray)),
            "weights_resident": anon + held,
            "layer_weight_surfaces": 0, "layer_weights_streamed": 0, "kv_cache": 0, "program_surfaces": 0,
            "classifier_panels": 0}


# what `counted` adds up: the resident part of the weights and the program-side kinds
COUNTED = ("weights_resident", "layer_weight_surfaces", "layer_weights_streamed", "kv_cache", "program_surfaces",
           "classifier_panels")


def memory_report(model) -> dict[str, int | None]:
    """Bytes by kind (see :meth:`orion.models.Model.memory`)."""
    out = _host_weights(model)
    eng = model._engine
    if eng is not None:
        seen: set[int] = set()

        def add(kind: str, key: int, nbytes: int) -> None:     # once per address, however many name it
            if key not in seen:
                seen.add(key)
                out[kind] += nbytes

        def count(kind: str, surface) -> None:
            add(kind, _surface_key(surface), int(surface.resident_bytes))

        streamed: set[int] = set()
        for layer in eng._layer_surf.values():
            for s in (*layer.surfaces.values(), *layer.panels.values()):
                count("layer_weight_surfaces", s)
            out["layer_weight_surfaces"] += sum(int(a.nbytes) for a in layer.fed.values())
            for parts in layer.streamed.values():           # compressed, one native copy however many sets use it
                for cw, _, _ in parts:
                    if id(cw) not in streamed:
                        streamed.add(id(cw))
                        out["layer_weights_streamed"] += int(cw.nbytes)
        progs, caches, held, targets, own = _programs(eng)
        for s in caches:                                     # shared stages: each layer's own cache
            count("kv_cache", s)
        for a in held:                                       # ... or held on the host, copied into ``targets``
            add("kv_cache", a.__array_interface__["data"][0], int(a.nbytes))
        for prog, cp in progs:
            for b in cp.io_plan.inputs.values():
                surface = prog.input_surface(b.mil_name)
                cache = b.name in CACHE_INPUTS and _surface_key(surface) not in targets
                count("kv_cache" if cache else "program_surfaces", surface)
            for o in cp.io_plan.outputs.values():
                for part in o.parts:
                    count("program_surfaces", prog.output_surface(part.mil_name))
        for s in own:
            count("program_surfaces", s)
        if eng._wcls is not None:
            out["classifier_panels"] = cpu_classifier.held_bytes(eng._wcls)
    counted = sum(out[k] for k in COUNTED)
    rss = process_rss()
    out.update(counted=counted, process_rss=rss, other=None if rss is None else rss - counted)
    return out


def _resident(tensor: int, alloc: int, mapped: bool = True) -> int:
    """What a surface of ``alloc`` bytes holding a ``tensor``-byte tensor keeps resident: all of it below the
    simulator's mapped size (heap memory, zeroed) or on a backend whose surfaces are not mapped (``mapped``:
    the ANE's IOSurfaces count whole), else the pages the tensor covers - a mapped surface's pages never
    written (C12's padding past a small input) are not (runtime/surface.h)."""
    if not mapped or (alloc + 63) // 64 * 64 < _native.SURFACE_MAPPED_BYTES:
        return alloc
    page = os.sysconf("SC_PAGE_SIZE")
    return min(alloc, -(-tensor // page) * page)


def _lowered_surfaces(lowered, streamed=(), pooled: bool = False, mapped: bool = True) -> dict[str, int]:
    """Bytes of one program's surfaces by kind, as the runtime allocates them - every surface of a direction at one
    size, max(largest tensor, the minimum surface) (C02/C04/C12) - and keeps resident (:func:`_resident`).
    ``weight``: the weight inputs bound per layer in a shared program; ``fed``: the values of those written into the
    program's own surfaces before each eval instead (stages.fed_per_eval), whose own surfaces are in ``other``, as
    are those of the ``streamed`` inputs (mil names: decoded into the program's own surface before each eval, or
    read from their compressed weights by the simulator, where a layer binds a panel surface that keeps nothing
    resident).
    ``kv_cache``: a cache's surface each, or its host array's bytes where the layer holds it on the host
    (stages.cache_copied_in: the program's own surface it is copied into is then in ``other``). ``pooled`` (a shared
    program of the engine's sets: stages.Stage's pool): its inputs other than weights are in ``pooled_inputs``
    instead, by (mil name, size) - one surface for every set. ``mapped``: the backend maps big surfaces (the
    simulator)."""
    def size(shape, dtype) -> int:
        return int(np.prod(shape)) * (2 if dtype == "fp16" else 4)
    floor = int(lowered.options.min_surface_bytes)
    ins = {b.mil_name: b for b in lowered.io.inputs.values()}
    outs = [p for o in lowered.io.outputs.values() for p in o.parts]
    in_alloc = max([floor] + [size(b.mil_shape, b.mil_dtype) for b in ins.values()])
    out_alloc = max([floor] + [size(p.mil_shape, p.mil_dtype) for p in outs])
    kinds = {"weight": 0, "fed": 0, "kv_cache": 0, "streamed_surfaces": set(), "pooled_inputs": set(),
             "other": sum(_resident(size(p.mil_shape, p.mil_dtype), out_alloc, mapped) for p in outs)}
    copied = set()
    for b in ins.values():
        fed = b.kind == "weight" and fed_per_eval(b, in_alloc)
        held = _resident(size(b.mil_shape, b.mil_dtype), in_alloc, mapped)
        if fed:
            kinds["fed"] += size(b.shape, b.mil_dtype)
        if b.mil_name in streamed and not fed:           # one surface for every program set (stages.py's pool)
            panels = mapped and b.pad_axis is None       # the simulator reads the weights from a layer's panel
            kinds["streamed_surfaces"].add((b.mil_name, tuple(b.mil_shape), b.mil_dtype, in_alloc,
                                            _resident(0, in_alloc) if panels else held))  # surface: its own
            continue                                     # is zeroed after the capture
        cache = b.name in CACHE_INPUTS
        if cache and pooled and cache_copied_in(b, in_alloc):
            kinds["kv_cache"] += size(b.mil_shape, b.mil_dtype)      # held as the surface lays it out
            copied.add(b.name)
        if pooled and b.kind != "weight" and (not cache or b.name in copied):
            kinds["pooled_inputs"].add((b.mil_name, in_alloc, held))
            continue
        kind = "kv_cache" if cache else "weight" if b.kind == "weight" and not fed else "other"
        kinds[kind] += held
    # how its caches are laid out: shared-layer program sets with the same layout share the layers' caches
    kinds["kv_layout"] = tuple(sorted((b.name, tuple(b.mil_shape), b.mil_dtype, "host" if b.name in copied
                                       else in_alloc) for b in ins.values() if b.name in CACHE_INPUTS))
    return kinds


def _maps_surfaces(eng) -> bool:
    """Whether the engine's backend maps its big surfaces (the simulator: runtime/surface.h)."""
    return resolve_device(eng.device) == "sim"


def _lowered_middle(eng, i: int, S: int, T: int) -> dict:
    """:func:`_lowered_surfaces` of the shared middle-stage program, with ``streamed``: the bytes one layer's
    streamed weights take natively (every middle stage holds the same tensors, compressed alike)."""
    g = eng.fam.stage_graph(eng.cfg, eng.w, i, S, T, shared=True, **eng.graph_options)
    stored = take_stored(g)
    lowered = check(g, **eng.program_options(True))
    parts = streamable(lowered.io, stored, {}) if eng.streaming else {}
    p = _lowered_surfaces(lowered, parts, pooled=True, mapped=_maps_surfaces(eng))
    p["streamed"] = sum(int(cw.nbytes) for ps in parts.values() for cw, _, _ in ps)
    return p


def memory_plan(model, n_prompt: int = PLAN_PROMPT, n_new: int = PLAN_NEW) -> dict:
    """What :func:`memory_report` will count after a first generation of ``n_prompt`` + ``n_new`` tokens,
    known before it: the host weights exactly, the programs' surfaces estimated by lowering the program sets
    that generation uses (the passes only: no compile budget charged) with the runtime's uniform surface
    size, the CPU classifier's panels from the vocabulary. ``estimated``: the kinds that are estimates;
    ``sets``: the (S, T) program sets counted. Not planned: what ``other`` holds (the native programs'
    baked weights and packed panels, scratch, the interpreter)."""
    for what, v in (("n_prompt", n_prompt), ("n_new", n_new)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < (1 if what == "n_prompt" else 0):
            raise InputError(f"memory_plan: {what} must be an int >= {1 if what == 'n_prompt' else 0} (tokens), "
                             f"got {v!r}")
    out = _host_weights(model, resident=False)        # the engine releases the mapped pages after each program
    eng = model.engine
    T = eng.ctx_bucket(n_prompt + n_new)
    sets = sorted({(eng._prefill_S(n_prompt, T), T), (DECODE_S, T)}, reverse=True)
    n = eng.fam.n_stages(eng.cfg)
    mapped = _maps_surfaces(eng)

    def lower(i: int, S: int, **extra) -> list[dict]:
        return [_lowered_surfaces(check(eng.fam.stage_graph(eng.cfg, eng.w, i, S, T, **extra, **eng.graph_options),
                                        **eng.program_options(extra.get("shared", False))), mapped=mapped)]

    shared_kv: set = set()
    pooled: set = set()                     # streamed layers' and shared programs' input surfaces, shared by the sets
    for k, (S, _) in enumerate(sets):
        for i in (0, 1, n - 1) if n > 2 else range(n):       # the middle stages hold the same tensors: one for all
            middle = 0 < i < n - 1
            copies = n - 2 if middle else 1
            if middle and eng.shared_layers:
                # one program; each layer binds its own weight surfaces (the same for every set) and cache
                # surface, or copies its cache in from the host; the program's own weight and bound cache surfaces
                # are replaced by them (its fed and streamed inputs' stay, in "other"); a streamed layer holds its
                # compressed weights natively; its other inputs' surfaces are the same for every set
                p = _lowered_middle(eng, i, S, T)
                out["program_surfaces"] += p["other"] + sum(k[-1] for k in p["streamed_surfaces"] - pooled)
                out["program_surfaces"] += sum(k[-1] for k in p["pooled_inputs"] - pooled)
                pooled |= p["streamed_surfaces"] | p["pooled_inputs"]
                out["kv_cache"] += p["kv_cache"] * copies if p["kv_layout"] not in shared_kv else 0
                shared_kv.add(p["kv_layout"])
                out["layer_weight_surfaces"] += (p["weight"] + p["fed"]) * copies if k == 0 else 0
                out["layer_weights_streamed"] += p["streamed"] * copies if k == 0 else 0
                continue
            split = eng._split_of(i, S, T)
            parts = (lower(i, S, shared=True) if split == AS_INPUTS else
                     lower(i, S) if split is None else [q for p in split for q in lower(i, S, part=p)])
            for p in parts:
                out["program_surfaces"] += (p["other"] + p["weight"]) * copies
                out["kv_cache"] += p["kv_cache"] * copies
    if eng.classifier == "cpu":
        out["classifier_panels"] = cpu_classifier.nbytes(eng.classifier_weights, eng.cfg.vocab_size, eng.cfg.d_model)
    out["counted"] = sum(out[k] for k in COUNTED)
    out["estimated"] = ["weights_resident", "layer_weight_surfaces", "layer_weights_streamed", "kv_cache",
                        "program_surfaces"]
    out["sets"] = sets
    return out
