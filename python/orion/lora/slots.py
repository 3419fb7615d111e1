"""Adapters as program inputs: the A/B inputs of the stage programs (:class:`AdapterSlots`), the graph
builders' linear (:func:`graph_linear`) and swapping a model's adapter (:func:`set_adapter`)."""

from __future__ import annotations

import logging
import os
from typing import Iterable

import numpy as np

from ..ir import Value, ops
from .adapter import Adapter, base_fingerprint, load
from .errors import AdapterConfigError, AdapterShapeError
from .targets import linear_shapes, model_config, resolve_targets

log = logging.getLogger("orion")


def slot_names(weight_name: str) -> tuple[str, str]:
    """Graph weight names of the A/B inputs next to baked weight ``weight_name``."""
    return f"{weight_name}_lora_a", f"{weight_name}_lora_b"


def graph_linear(g, x, weight_name: str, W, bias=None, slots=None, canonical: str | None = None):
    """``ops.linear`` with baked ``W`` (or a graph value: a weight input the caller made, which the
    dynamic-weights pass lowers to its ``[1, IC, 1, OC]`` matmul idiom - on decode's live columns a
    streaming GEMV over the weight's rows), plus a LoRA branch whose A/B are program inputs when
    ``slots`` (an :class:`AdapterSlots`, or any mapping canonical name -> (A [R, in], B [out, R]) initial
    values) has ``canonical``. The model graph builders call this for every linear."""
    w = W if isinstance(W, Value) else g.weight(weight_name, W)
    ab = slots.get(canonical) if slots is not None and canonical is not None else None
    if ab is None:
        return ops.linear(x, w, bias)
    na, nb = slot_names(weight_name)
    if isinstance(slots, AdapterSlots):
        slots.graph_names[na] = (canonical, 0)
        slots.graph_names[nb] = (canonical, 1)
    return ops.lora_linear(x, w, g.weight(na, ab[0], dynamic=True), g.weight(nb, ab[1], dynamic=True), bias)


class AdapterSlots:
    """The adapter inputs of a model's programs: which linears have A/B inputs and their rank ``R``.

    ``get(name)`` gives the graph builders the current values (A zero-padded to ``[R, in]``, ``scale · B``
    zero-padded to ``[out, R]``; zeros where the current adapter has no tensor), so programs compiled
    later start with the current adapter; :meth:`assign` + :meth:`stage` swap adapters in programs that
    already exist (surface writes only)."""

    def __init__(self, cfg, names: Iterable[str], rank: int):
        self.cfg = model_config(cfg)
        shapes = linear_shapes(self.cfg)
        self.names = [n for n in shapes if n in set(names)]
        self.rank = int(rank)
        self.adapter: Adapter | None = None
        self.graph_names: dict[str, tuple[str, int]] = {}
        self._shapes = {n: shapes[n] for n in self.names}
        self._values = self._zeros()

    def _zeros(self) -> dict:
        return {n: (np.zeros((self.rank, inp), np.float32), np.zeros((out, self.rank), np.float32))
                for n, (out, inp) in self._shapes.items()}

    def covers(self, names: Iterable[str], rank: int) -> bool:
        return set(names) <= set(self.names) and rank <= self.rank

    def get(self, name: str):
        return self._values.get(name)

    def assign(self, adapter: Adapter | None) -> None:
        vals = self._zeros()
        if adapter is not None:
            if not self.covers(adapter.names, adapter.rank):
                raise AdapterShapeError(f"adapter (rank {adapter.rank} on {len(adapter.names)} linears) does not fit "
                                        f"the program slots (rank {self.rank} on {len(self.names)} linears)")
            for n in adapter.names:
                a, b = vals[n]
                r = adapter.A[n].shape[0]
                a[:r] = adapter.A[n]
                b[:, :r] = adapter.B[n] * adapter.scale(n)
        self._values = vals
        self.adapter = adapter

    def values_for(self, program) -> dict[str, np.ndarray]:
        """The current A/B arrays of every adapter input of ``program`` (a CompiledProgram), by weight name."""
        out = {}
        for wn in program.dynamic_weights:
            hit = self.graph_names.get(wn)
            if hit is not None:
                out[wn] = self._values[hit[0]][hit[1]]
        return out

    def stage(self, programs: Iterable) -> int:
        """Writes the current values into ``programs`` (CompiledPrograms); returns the surfaces written."""
        n = 0
        for cp in programs:
            vals = self.values_for(cp)
            if vals:
                cp.set_weights(**vals)
                n += len(vals)
        return n


def _engine_programs(engine) -> list:
    """The programs whose adapter inputs hold the current adapter; a shared layer program takes each
    layer's own (:meth:`Engine.refresh_layer_weights`)."""
    return [cp for stages in engine.sets.values() for st in stages if not hasattr(st, "layer") for cp in st.programs]


def set_adapter(model, adapter, *, rank: int | None = None, targets=None, check_base: bool = True) -> None:
    """Runs ``model`` (an :class:`orion.models.Model`) with ``adapter`` from its next evaluation on: an
    :class:`Adapter`, a PEFT folder/file path, or None for the base model.

    The stage programs get A/B inputs for the adapted linears the first time an adapter needs them
    (``rank`` / ``targets`` reserve more: any adapter within the slots then swaps with zero compiles and
    zero loads — only surface writes; None stages zeros, which gives the base model's outputs exactly).
    An adapter outside the current slots widens them and the programs are compiled again at their next
    use (logged). Swap between generations: the KV cache of a running generation is not recomputed."""
    cfg = model.config
    if isinstance(adapter, (str, os.PathLike)):
        adapter = load(adapter, cfg, check_base=False)
    elif adapter is not None and not isinstance(adapter, Adapter):
        raise AdapterConfigError(f"set_adapter expects an orion.lora.Adapter, a path or None, got "
                                 f"{type(adapter).__name__}")
    if adapter is not None:
        fp = None
        if check_base and adapter.base:
            fp = getattr(model, "_lora_base_fp", None)
            if fp is None or fp[0] is not model.weights:
                fp = (model.weights, base_fingerprint(cfg, model.weights))     # once per model
                model._lora_base_fp = fp
            fp = fp[1]
        adapter.check_model(cfg, fingerprint=fp)
    names = set(adapter.names) if adapter is not None else set()
    if targets is not None:
        names |= set(resolve_targets(cfg, targets))
    want_rank = max([adapter.rank if adapter is not None else 0, int(rank or 0)])
    slots: AdapterSlots | None = getattr(model, "_lora_slots", None)
    if slots is None and not names:
        model._lora_adapter = None
        return
    if slots is None or not slots.covers(names, want_rank):
        if slots is not None:
            names |= set(slots.names)
            want_rank = max(want_rank, slots.rank)
        slots = AdapterSlots(cfg, names, max(1, want_rank))
        model._lora_slots = slots
        eng = getattr(model, "_engine", None)
        if eng is not None:
            if eng.sets:
                log.info("orion: the adapter needs new program inputs (rank %d on %d linears): the stage programs "
                         "are compiled again at their next use", slots.rank, len(slots.names))
                eng.drop_program_sets()
            eng.graph_options["lora"] = slots
    slots.assign(adapter)
    model._lora_adapter = adapter
    eng = getattr(model, "_engine", None)
    if eng is not None:
        eng.graph_options["lora"] = slots
        slots.stage(_engine_programs(eng))
        eng.refresh_layer_weights()      # shared layer programs: each layer's adapter into its own surfaces


def get_adapter(model) -> Adapter | None:
    return getattr(model, "_lora_adapter", None)
