"""The decode engine: a model's stage programs, its KV cache and its classifier.

Design - the KV cache as program inputs:

* The network is cut at the attention inputs (see :mod:`orion.models.gpt2` / :mod:`orion.models.llama`):
  ``L + 1`` stage programs per *program set* ``(S, T)``: ``S`` query columns, ``T`` cache length. Weights
  are baked (convs, C46); nothing is recompiled per token.
* The KV cache lives in the cache **input surfaces** of the stage programs (staged once, then written
  in place through zero-copy surface views: only the new columns cross per token), with a host mirror
  so a different program set (prefill bucket, longer context bucket) can be synchronised once.
* Prefill runs the prompt through a set with ``S`` = a sequence bucket (16, 32, 64, ... chunks);
  decode uses ``S = 16`` (the ANE minimum, C04) with the new token in column 0. The causal structure is
  an additive ``mask [1,1,S,T]`` input (0 / -1e4), RoPE angles are ``cos``/``sin`` inputs, so one program
  serves every position. Context buckets ``T`` (powers of two up to ``n_ctx``) bound the attention work.
* Programs are compiled once per ``(S, T)`` and kept; the classifier runs on the CPU (fp16 weights in
  16-row panels, or int8 codes, through the native GEMM: fp32 accumulation, no second thread pool spinning
  between the stage programs; :mod:`.classifier`) or as chunked programs (``classifier="device"``;
  rows split so no axis exceeds C22's 65,536 and no program holds more than ``classifier_chunk`` rows,
  C26).
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from functools import partial
from typing import Sequence

import numpy as np

from .. import _native
from ..compiler.driver import check
from ..compiler.driver import compile as compile_graph
from ..errors import BudgetExceeded, CompileError, InputError, ModelFormatError
from ..ir import Graph, ops
from ..quant import QuantizedArray
from ..native.runtime import resolve_device
from . import classifier as cpu_classifier
from . import host_pages, llama
from .chain import StepChain, feed_once, same_feeds, shared_feeds
from .feeds import additive_mask, layer_feeds
from .fp16_safety import Fp16Plan, Fp16RangeError, replan, resolve_fp16_plan
from .layer_params import take_stored
from .stages import LayerStage, SplitStage, Stage, capture_layer_weights

log = logging.getLogger("orion")

__all__ = ["Engine", "StageOverflow", "DECODE_S", "PREFILL_BUCKETS", "LAYER_MODES", "BAKED_SET_LIMIT"]

# How a program with weights as inputs (shared layers) lays them out: column panels, which decode's one-column
# products stream front to back, packed so that C12's uniform input size pads none of them.
SHARED_COMPILE_OPTIONS = {"panel_dynamic_weights": True, "pack_dynamic_weights": True}

DECODE_S = 16                      # C04: the smallest sequence the ANE evaluates correctly
PREFILL_BUCKETS = (16, 32, 64, 128, 256)
LAYER_MODES = ("auto", "baked", "shared")
AS_INPUTS = ("inputs",)        # _split_of: a stage no split fits, compiled with its weights as program inputs
# layers="auto" bakes the layers (1x1 convs: the ANE's fastest linear, C46) while a baked program set costs
# at most this many compiles, and shares one program among the middle stages beyond: a generation, a batch
# and each further context bucket need a set, a draft model its own, and the process has ~119 (C05)
BAKED_SET_LIMIT = 8


class StageOverflow(Exception):
    """Internal: a stage's residual output is not finite (``layer``: the layer it ran)."""

    def __init__(self, layer: int):
        super().__init__(layer)
        self.layer = layer


def _family(cfg):
    """The graph builder module of a config (every Llama-style model_type shares models/llama.py)."""
    if cfg.family == "gpt2":
        from . import gpt2  # start-up: orion.models.gpt2 loads only for a GPT-2 model
        return gpt2
    if cfg.family == "llama":
        return llama
    raise ModelFormatError(f"unsupported model family {cfg.family!r}")


def _take_values(g: Graph) -> dict:
    """``{weight name: (its graph value, its array)}``, the arrays taken out of the graph: a graph is a cycle of
    nodes and values that only the garbage collector frees, which would keep every layer's (decoded) weights
    alive for a while after the graph is dropped."""
    return {n: (v, np.asarray(v.node.attrs.pop("value"))) for n, v in g.weights.items()}


class _LayerValues(dict):
    """A shared stage's weight values by graph name; ``stored``: the compressed ones as stored (QuantizedArray)."""
    stored: dict = {}


class Engine:
    """Runs one model on a device: ``reset()``, ``prefill(ids)``, ``step(token)`` → logits.

    ``ctx_buckets``: cache lengths T to compile for (default powers of two from 64 to n_ctx, plus n_ctx);
    ``prefill_buckets``: prefill chunk sizes S; ``classifier``: "cpu" or "device"; ``classifier_weights``: the
    CPU classifier's "fp16" or "int8" (:mod:`.classifier`; the device classifier is fp16);
    ``residual_scale``: factor carried by the residual stream inside the programs so that it stays within
    fp16 (exact up to rounding; see :mod:`orion.models.fp16_safety`): a number, or "auto" (measured on
    ``probe_ids`` - default :func:`~.fp16_safety.calibration_ids` - through the model definition in
    float64 at construction, and re-planned on the text itself when a stage's output leaves fp16 at run
    time; a number is kept, and such an overflow is an :class:`~.fp16_safety.Fp16RangeError`)."""

    skip_dead_columns = True    # live_columns hint: padding columns are not computed (simulator; per engine too)
    use_chain = True            # a step's layers in one native call where the stages allow it (models/chain.py)

    def __init__(self, cfg, weights: dict, *, device: str = "auto", profile=None, classifier: str = "cpu",
                 ctx_buckets: Sequence[int] | None = None, prefill_buckets: Sequence[int] = PREFILL_BUCKETS,
                 classifier_chunk: int = 16384, compile_options: dict | None = None, residual_scale="auto",
                 probe_ids=None, layers: str = "auto", stream_weights="auto", classifier_weights: str = "fp16"):
        if classifier not in ("cpu", "device"):
            raise InputError(f"classifier must be 'cpu' or 'device', got {classifier!r}")
        self.classifier_weights = cpu_classifier.check_weights(classifier_weights)
        if layers not in LAYER_MODES:
            raise InputError(f"layers must be one of {', '.join(LAYER_MODES)}, got {layers!r}")
        if stream_weights not in ("auto", True, False):
            raise InputError(f"stream_weights must be 'auto', True or False, got {stream_weights!r}")
        self.layers = layers
        self.stream_weights = stream_weights
        self._natives: dict = {}        # streamed layers: id(QuantizedArray) -> (it, its native form), models/streamed.py
        self._own_pool: dict = {}       # streamed layers: the weight surfaces they decode into, shared by the sets
        self.fp16 = resolve_fp16_plan(cfg, weights, residual_scale, probe_ids)
        self.residual_scale = self.fp16.scale
        self._scale_spec = residual_scale
        self._ids: list[int] = []                        # the token at each cached position (re-planning)
        self.cfg, self.w = cfg, weights
        self.fam = _family(cfg)
        self.device, self.profile = device, profile
        self.classifier = classifier
        self.classifier_chunk = int(classifier_chunk)
        self.compile_options = dict(compile_options or {})
        n_ctx = cfg.n_ctx
        if ctx_buckets is None:
            b, ctx_buckets = 64, []
            while b < n_ctx:
                ctx_buckets.append(b)
                b *= 2
            ctx_buckets.append(n_ctx)
        self.ctx_buckets = sorted({max(DECODE_S, min(int(t), n_ctx)) for t in ctx_buckets} | {max(DECODE_S, n_ctx)})
        self.prefill_buckets = sorted({max(DECODE_S, int(s)) for s in prefill_buckets})
        # host mirror of the KV cache, sized for the current context bucket (grown on demand: a model's
        # n_ctx may be 128k positions that no call uses). Steps write only the running set's caches; the
        # mirror catches up from that set when read (k_host / v_host): a column write per layer each fewer.
        self._k_host = np.zeros((cfg.n_layers, cfg.kv_dim, 0), np.float16)
        self._v_host = np.zeros((cfg.n_layers, cfg.kv_dim, 0), np.float16)
        self._host_pos = 0                               # the mirror holds positions [0, _host_pos)
        self._writer: tuple[int, int] | None = None      # the set whose caches hold [_host_pos, pos)
        self.sets: dict[tuple[int, int], list[Stage]] = {}
        self.batch_sets: dict[int, tuple] = {}           # region length -> (LoRA slots, stages): models/batch.py
        self.cls_sets: dict[int, list[tuple[int, int, Stage]]] = {}
        self._synced: dict[tuple[int, int], int] = {}
        self._chains: dict = {}                          # ((S, T), n) -> (stages, StepChain or None)
        self._wcls = None                                # the CPU classifier's weight (models/classifier.py)
        self.pos = 0
        self.T = self.ctx_buckets[0]
        self.compiles = 0
        self.compile_seconds = 0.0
        self.graph_options: dict = {}                    # extra stage_graph arguments (orion.lora: adapter slots)
        self._layer_surf: dict[int, object] = {}         # shared layers: each middle stage's LayerWeights
        self._cache_pool: dict[tuple, object] = {}       # shared layers: caches the program sets share
        self._input_pool: dict[tuple, object] = {}       # shared programs: input surfaces the sets share (Stage)
        self._host_maps: list | None = None              # the weight cache mappings self.w views (host_pages)
        self._splits: dict[tuple, tuple] = {}            # kind of stage + options -> (options, its parts)
        if self.fp16 != Fp16Plan():
            self.graph_options["fp16"] = self.fp16
        self.release_host_pages()                        # the fp16 probe read every weight

    # -- programs --------------------------------------------------------------------------------
    @property
    def shared_layers(self) -> bool:
        """Whether the middle stages share one program (weights as inputs): ``layers="shared"``, or "auto"
        when a baked program set would cost more than :data:`BAKED_SET_LIMIT` compiles; never for W8A8 (its
        activation scales are per-layer constants) or a family without shared stages (GPT-2)."""
        if self.layers == "baked" or not getattr(self.fam, "SHARED_STAGES", False) or \
                self.graph_options.get("activations") is not None or self.fam.n_stages(self.cfg) < 3:
            return False
        return self.layers == "shared" or self._baked_set_cost() > BAKED_SET_LIMIT

    @property
    def streaming(self) -> bool:
        """Whether programs that take their weights as inputs (shared layers) keep each layer's compressed weights
        compressed - read in place by the simulator's GEMMs, or decoded into the program's own surfaces before each
        of its evals (models/streamed.py) -
        instead of an fp16 copy of the layer in surfaces of its own: ``stream_weights=True``, or "auto" when the
        model has compressed weights (the reason to compress them is memory)."""
        if self.stream_weights != "auto":
            return bool(self.stream_weights)
        return any(isinstance(a, QuantizedArray) for a in self.w.values())

    def _programs_of(self, i: int, **extra) -> int:
        """Compiles stage ``i`` costs (one per part of a split; the split does not depend on S and T)."""
        return len(self._split_of(i, DECODE_S, self.ctx_buckets[0], **extra) or (None,))

    def _baked_set_cost(self, **extra) -> int:
        return sum(self._programs_of(i, **extra) for i in range(self.fam.n_stages(self.cfg)))

    def release_host_pages(self) -> None:
        """The host weights' file pages back to the OS once programs hold the weights (host_pages): a new
        program set reads them again from the page cache."""
        if self._host_maps is None:
            self._host_maps = host_pages.file_maps(self.w.values())
        host_pages.release_maps(self._host_maps)

    def program_options(self, shared: bool = False) -> dict:
        """The compiler's options for a stage program (``shared``: its weights are program inputs)."""
        opts = {**SHARED_COMPILE_OPTIONS, **self.compile_options} if shared else dict(self.compile_options)
        return dict(device=self.device, profile=self.profile, **opts)

    def _compile(self, g: Graph, shared: bool = False):
        t = time.perf_counter()
        cp = compile_graph(g, **self.program_options(shared))
        cp.drop_weight_files()             # the runtime holds the weights; a host copy per program doubles them
        if shared:
            cp.drop_host_weights()         # each layer's values are in its own surfaces
            _take_values(g)
        self.compile_seconds += time.perf_counter() - t
        self.compiles += 1
        return cp

    def program_set(self, S: int, T: int) -> list[Stage]:
        key = (S, T)
        if key not in self.sets:
            before = self.compiles
            self.sets[key] = self.stage_list(S, T)
            self._synced[key] = 0
            log.info("orion: compiled %d stage programs for S=%d T=%d", self.compiles - before, S, T)
        return self.sets[key]

    def stage_list(self, S: int, T: int, **extra) -> list:
        """The stages of one program set, in order (``extra``: more ``stage_graph`` arguments, e.g. the batch
        programs' ``regions=True``). Baked layers: a program (or split) per stage. Shared layers: stage 0
        and the last stage baked, every middle stage a :class:`LayerStage` of ONE program with weights as
        inputs - three programs whatever the depth."""
        n = self.fam.n_stages(self.cfg)
        stages: list = []
        try:
            if not self.shared_layers or n < 3:
                for i in range(n):
                    stages.append(self._stage(i, S, T, **extra))
                return stages
            stages.append(self._stage(0, S, T, **extra))
            stages += self._shared_stages(S, T, **extra)
            stages.append(self._stage(n - 1, S, T, **extra))
            return stages
        except BaseException:
            for s in stages:
                s.release()
            raise

    def _layer_weights(self, stage: int, S: int, T: int, **extra) -> dict:
        """Middle stage ``stage``'s values of the shared program's weight inputs (graph name -> array, as
        ``set_weights`` takes them), read off that stage's own shared graph: the model definition applies
        every host-side fold (Gemma's scaled post-norms, adapters) once, for every layer alike."""
        g = self.fam.stage_graph(self.cfg, self.w, stage, S, T, shared=True, **{**self.graph_options, **extra})
        out = _LayerValues((n, a.reshape(v.node.attrs.get("user_shape", v.shape))) for n, (v, a) in _take_values(g).items())
        out.stored = take_stored(g)
        return out

    def _capture(self, base: Stage, values, reuse=None):
        """:func:`capture_layer_weights` of one layer on a program taking its weights as inputs, streamed when
        :attr:`streaming` (the native forms and the surfaces decoded into: the engine's, shared by every set)."""
        return capture_layer_weights(base, values, reuse, self._natives if self.streaming else None, self._own_pool)

    def _shared_stages(self, S: int, T: int, **extra) -> list:
        n = self.fam.n_stages(self.cfg)
        opts = {**self.graph_options, **extra}
        base = Stage(self._compile(self.fam.stage_graph(self.cfg, self.w, 1, S, T, shared=True, **opts), shared=True),
                     caches=False, pool=None if extra else self._input_pool)      # batch programs: their own
        out: list = []
        try:
            for i in range(1, n - 1):
                lw = self._capture(base, partial(self._layer_weights, i, S, T, **extra), self._layer_surf.get(i))
                self._layer_surf[i] = lw
                self.release_host_pages()            # layer by layer: at most one layer's pages resident
                out.append(LayerStage(base, i, lw, owner=(i == 1), build=(S, T, extra),
                                      lora=self.graph_options.get("lora"),
                                      cache_pool=None if extra else self._cache_pool))   # batch caches: their own
            base.spare_surfaces.clear()
        except BaseException:
            for st in out:                     # the first (the owner) releases the shared program
                st.release()
            if not out:
                base.release()
            raise
        return out

    def refresh_layer_weights(self) -> None:
        """Captures every shared stage's layer weights again (after adapter values changed: set_adapter
        staged them into the shared programs, whose bound surfaces belong to one layer)."""
        bases = []
        for stages in [*self.sets.values(), *(st for _, st in self.batch_sets.values())]:
            for st in stages:
                if isinstance(st, LayerStage) and st.lora is self.graph_options.get("lora"):  # else rebuilt at use
                    S, T, extra = st.build
                    st.set_weights(self._capture(st.base, partial(self._layer_weights, st.layer, S, T, **extra),
                                                 self._layer_surf.get(st.layer)))
                    self._layer_surf[st.layer] = st.weights
                    bases.append(st.base)
        for base in bases:
            base.spare_surfaces.clear()

    def _stage(self, i: int, S: int, T: int, **extra):
        """Stage ``i`` as one program or, when its weights exceed one program's budget (C18/C19) and the
        family can cut it, as the parts of the coarsest of the family's ``SPLITS`` that fits
        (:meth:`_split_of`); ``extra``: more ``stage_graph`` arguments (batched decode: ``regions=True``)."""
        build, opts = self.fam.stage_graph, {**self.graph_options, **extra}
        split = self._split_of(i, S, T, **extra)
        if split is None:
            stage = Stage(self._compile(build(self.cfg, self.w, i, S, T, **opts)))
            self.release_host_pages()                # the program holds the stage's weights now
            return stage
        if split == AS_INPUTS:                 # no split fits: the stage's own program with weights as inputs
            base = Stage(self._compile(build(self.cfg, self.w, i, S, T, shared=True, **opts), shared=True), caches=False)
            return LayerStage(base, i, self._capture(base, self._layer_weights(i, S, T, **extra)), owner=True,
                              build=(S, T, extra), lora=self.graph_options.get("lora"))
        done: list[Stage] = []
        try:
            for p in split:
                done.append(Stage(self._compile(build(self.cfg, self.w, i, S, T, part=p, **opts))))
        except BaseException:
            for st in done:
                st.release()
            raise
        return SplitStage(done)

    def _split_of(self, i: int, S: int, T: int, **extra) -> tuple | None:
        """The parts stage ``i`` is compiled as: None (one program) or the coarsest of the family's
        ``SPLITS`` whose parts pass the compiler's checks (C18/C19: the weight budget). Found by lowering
        without compiling (:func:`orion.compiler.check`: no compile budget is charged), once per kind of
        stage (the first, the middle ones - which hold the same tensors -, the last) and program options."""
        n = self.fam.n_stages(self.cfg)
        kind = "first" if i == 0 else "last" if i == n - 1 else "middle"
        key = (kind, tuple(sorted(extra.items())), tuple(self.graph_options))
        opts_now = tuple(self.graph_options.values())
        hit = self._splits.get(key)
        if hit is not None and len(hit[0]) == len(opts_now) and all(a is b for a, b in zip(hit[0], opts_now)):
            return hit[1]           # the same option objects (held here, so their identity cannot be reused)
        build, opts = self.fam.stage_graph, {**self.graph_options, **extra}
        kw = self.program_options()
        found, last_error = None, None
        for split in ((None,), *getattr(self.fam, "SPLITS", ())):
            # stage 0 holds only layer 0's projections, the last stage no projections
            parts = [p for p in split if p is None or (not (i == 0 and p != "qkv") and not (i == n - 1 and p == "qkv"))]
            try:
                for p in parts:
                    check(build(self.cfg, self.w, i, S, T, **({"part": p} if p else {}), **opts), **kw)
            except CompileError as e:
                if e.constraint not in ("C18", "C19"):
                    raise
                last_error = e
                log.info("orion: stage %d as %s exceeds the weight budget (%s)", i, split, e.constraint)
                continue
            found = None if split == (None,) else tuple(parts)
            break
        else:
            if not getattr(self.fam, "SHARED_STAGES", False) or self.graph_options.get("activations") is not None:
                raise last_error
            found = AS_INPUTS                  # weights as program inputs take no weight-file slot (C18)
            log.info("orion: stage %d fits no split: its weights become program inputs", i)
        self._splits[key] = (opts_now, found)
        return found

    def _classifier_set(self, S: int):
        if S not in self.cls_sets:
            W = self.fam.classifier_weight(self.cfg, self.w)
            V, d = W.shape
            step = max(1, min(self.classifier_chunk, 65536))
            n = math.ceil(V / step)
            step = math.ceil(V / n)
            progs = []
            for r0 in range(0, V, step):
                r1 = min(V, r0 + step)
                g = Graph(f"classifier_S{S}_{r0}")
                h = g.input("h", (1, d, 1, S))
                g.output("logits", ops.linear(h, g.weight("wcls", W[r0:r1])))
                progs.append((r0, r1, Stage(self._compile(g))))
            self.cls_sets[S] = progs
        return self.cls_sets[S]

    def _budget_left(self) -> int | None:
        try:
            used, limit = _native.budget(resolve_device(self.device))
            return int(limit) - int(used)
        except Exception:  # noqa: BLE001 - no budget information: no guard
            return None

    # -- the compile plan (C05), known before compiling ------------------------------------------
    def set_cost(self, **extra) -> int:
        """Compiles one program set costs (``extra``: ``regions=True`` for the batch set), without
        compiling: a program per stage (per part of a split stage), or with shared layers the first stage,
        ONE program for every middle stage and the last stage."""
        if not self.shared_layers:
            return self._baked_set_cost(**extra)
        return self._programs_of(0, **extra) + 1 + self._programs_of(self.fam.n_stages(self.cfg) - 1, **extra)

    def _classifier_chunks(self) -> int:
        """Programs of one device classifier set (0 with the CPU classifier)."""
        if self.classifier != "device":
            return 0
        return math.ceil(self.cfg.vocab_size / max(1, min(self.classifier_chunk, 65536)))

    def _classifier_cost(self, S: int) -> int:
        return 0 if S in self.cls_sets else self._classifier_chunks()

    def compile_plan(self) -> dict:
        """What each use of the model compiles, known before compiling anything (found by lowering the
        stage graphs, which charges no compile budget): ``layers`` ("baked" / "shared"), ``per_set`` (one
        program set), ``generate`` (a first generation: its prefill and decode sets, and the device
        classifier's chunks for both), ``batch`` (the region set ``generate_batch`` adds), ``compiled``
        (so far) and ``budget_left`` (the process's, C05; None when the device does not say)."""
        per = self.set_cost()
        sets = 1 if self.prefill_buckets == [DECODE_S] else 2
        return {"layers": "shared" if self.shared_layers else "baked", "per_set": per,
                "generate": sets * (per + self._classifier_chunks()),
                "batch": self.set_cost(regions=True), "compiled": self.compiles,
                "budget_left": self._budget_left()}

    def ensure_budget(self, need: int, what: str) -> None:
        """Refuses, before compiling anything, ``need`` compiles that the process's budget (C05) cannot
        afford: a :class:`~orion.errors.BudgetExceeded` naming the numbers and the ways out."""
        left = self._budget_left()
        if left is None or need <= left:
            return
        e = BudgetExceeded(
            f"{what} needs {need} more compiles, {left} of this process's compile budget are left (C05: ~119 "
            f"per process on the ANE; releasing a model does not return them). This model compiles "
            f"{self.set_cost()} programs per set ({'shared' if self.shared_layers else 'baked'} layers). Ways "
            f"out: run it in a fresh process; load with layers='shared' (a set then costs 3 programs at any "
            f"depth); prefill_buckets=[16] (prompts through the decode programs); fewer models per process")
        e.constraint = "C05"
        raise e

    def prepare(self, n_prompt: int, n_total: int) -> None:
        """Compiles (once) what a generation of ``n_total`` tokens from ``n_prompt`` prompt tokens uses,
        after checking that the budget affords it (:meth:`ensure_budget`). When it cannot afford a separate
        prefill set, prompts are prefilled through the decode set in chunks of 16."""
        T = self.ctx_bucket(n_total)
        S = self._prefill_S(n_prompt, T)
        new = [k for k in {(S, T), (DECODE_S, T)} if k not in self.sets]
        per = self.set_cost() if new else 0
        left = self._budget_left()
        if len(new) == 2 and left is not None and left < 2 * per + 2 * self._classifier_cost(S):
            log.warning("orion: compile budget low (%d left): prefilling through the decode programs", left)
            self.prefill_buckets = [DECODE_S]
            new = [k for k in {(DECODE_S, T)} if k not in self.sets]
        S = self._prefill_S(n_prompt, T)
        classifier = self._classifier_cost(S) + (self._classifier_cost(DECODE_S) if S != DECODE_S else 0)
        self.ensure_budget(len(new) * per + classifier,
                           f"a generation of {n_total} tokens (program sets {sorted(new)})")
        self.program_set(S, T)
        self.program_set(DECODE_S, T)
        if self.classifier == "device":
            self._classifier_set(S)
            self._classifier_set(DECODE_S)
        else:                           # the CPU classifier's weight layout, built with the programs
            self._cpu_classifier()

    def ctx_bucket(self, n: int) -> int:
        i = bisect.bisect_left(self.ctx_buckets, n)
        if i == len(self.ctx_buckets):
            raise InputError(f"sequence of {n} tokens exceeds the context of {self.cfg.n_ctx}")
        return self.ctx_buckets[i]

    def _prefill_S(self, n: int, T: int) -> int:
        ok = [s for s in self.prefill_buckets if s <= T] or [DECODE_S]
        i = bisect.bisect_left(ok, n)
        return ok[min(i, len(ok) - 1)]

    def drop_program_sets(self) -> None:
        """Releases the stage program sets (compiled again at their next use, e.g. with new LoRA inputs);
        the cached text stays in the host mirror."""
        self._catch_up_host()
        self._writer = None
        self._chains.clear()
        for stages in self.sets.values():
            for s in stages:
                s.release()
        self.sets.clear()

    def _drop_batch_sets(self) -> None:
        for _, stages in self.batch_sets.values():
            for s in stages:
                s.release()
        self.batch_sets.clear()

    def release(self) -> None:
        self.drop_program_sets()
        for progs in self.cls_sets.values():
            for _, _, s in progs:
                s.release()
        self._drop_batch_sets()
        self.cls_sets.clear()
        self._layer_surf.clear()
        self._cache_pool.clear()
        self._input_pool.clear()
        self._own_pool.clear()

    # -- state -----------------------------------------------------------------------------------
    def reset(self, n_total: int | None = None) -> None:
        """Empties the cache; ``n_total`` (prompt + new tokens) picks the context bucket."""
        self.pos = 0
        self._ids = []
        self._host_pos, self._writer = 0, None
        for k in self._synced:
            self._synced[k] = 0
        self.T = self.ctx_bucket(n_total or 1)
        self._host_capacity(self.T)

    @property
    def k_host(self) -> np.ndarray:
        """The cached keys of every layer ``[n_layers, kv_dim, T]`` (positions below ``pos`` hold the text)."""
        self._catch_up_host()
        return self._k_host

    @property
    def v_host(self) -> np.ndarray:
        self._catch_up_host()
        return self._v_host

    def _catch_up_host(self) -> None:
        """Copies the positions the mirror lacks from the caches of the set that wrote them."""
        have, key = self._host_pos, self._writer
        if key is not None and have < self.pos:
            stages = self.sets[key]
            for l in range(1, len(stages)):
                c = stages[l].cache
                self._k_host[l - 1, :, have:self.pos] = c["k_cache"][:, have:self.pos]
                self._v_host[l - 1, :, have:self.pos] = c["v_cache"][:, have:self.pos]
        self._host_pos = self.pos

    def _host_capacity(self, T: int) -> None:
        have = self._k_host.shape[2]
        if have >= T:
            return
        for name in ("_k_host", "_v_host"):
            old = getattr(self, name)
            new = np.zeros(old.shape[:2] + (T,), np.float16)
            new[:, :, :have] = old
            setattr(self, name, new)

    def _sync(self, key, stages) -> None:
        have = self._synced.get(key, 0)
        if have >= self.pos:
            return
        for l in range(1, len(stages)):
            c = stages[l].cache
            c["k_cache"][:, have:self.pos] = self.k_host[l - 1, :, have:self.pos]
            c["v_cache"][:, have:self.pos] = self.v_host[l - 1, :, have:self.pos]
        self._synced[key] = self.pos

    def _mask(self, S: int, T: int, p0: int, n: int, window: int | None = None) -> np.ndarray:
        return additive_mask(S, T, p0, n, window)

    def _layer_inputs(self, S: int, T: int, p0: int, n: int, positions=None, mask=None, rope=None) -> list[dict]:
        return layer_feeds(self.cfg, self.fam, S, T, p0, n, positions, mask, rope)

    def _split(self, out: dict):
        if "qkv" in out:
            d, kv = self.cfg.d_model, self.cfg.kv_dim
            qkv = out["qkv"]
            return qkv[:, :d], qkv[0, d:d + kv, 0], qkv[0, d + kv:, 0]
        return out["q"], out["k"][0, :, 0], out["v"][0, :, 0]

    def _block(self, ids: Sequence[int], S: int) -> np.ndarray:
        """Runs ``ids`` (at most S) at positions pos.. through the set (S, T); returns h [d, n] float32."""
        cfg, T, p0, n = self.cfg, self.T, self.pos, len(ids)
        if p0 + n > T:
            raise InputError(f"internal: {p0 + n} positions exceed the cache bucket {T}")
        key = (S, T)
        stages = self.program_set(S, T)
        self._sync(key, stages)
        if self._writer != key:                          # the mirror takes over the other set's positions
            self._catch_up_host()
            self._writer = key
        x = np.zeros((1, cfg.d_model, 1, S), np.float16)
        e = self.fam.embed(cfg, self.w, ids, p0)
        x[0, :, 0, :n] = e * np.float32(self.residual_scale) if self.residual_scale != 1.0 else e
        feeds = self._layer_inputs(S, T, p0, n)
        live = n if self.skip_dead_columns else None       # columns >= n are padding: not computed
        chain = self._step_chain(key, stages, n, feeds) if live is not None else None
        if chain is not None:                            # the layers in one native call
            feed_once(stages, {"x": x, **feeds[0]}, feeds)
            bad = chain.run(p0)
            if bad >= 0:
                raise StageOverflow(bad - 1)
            return self._advance(key, p0, ids, chain.h)
        out = stages[0].run({"x": x, **feeds[0]}, live=live)
        resid = x
        L = len(stages) - 1
        for l in range(1, L + 1):
            q, k, v = self._split(out)
            c = stages[l].cache
            c["k_cache"][:, p0:p0 + n] = k[:, :n]
            c["v_cache"][:, p0:p0 + n] = v[:, :n]
            out = stages[l].run({"x": resid, "q_attn": q, **feeds[l]}, live=live,
                                unchanged=shared_feeds(stages, feeds, l))
            resid = out["x_out"] if l < L else out["h"]
            if not np.isfinite(resid[0, :, 0, :n]).all():     # d x n values: cheap next to the stage's eval
                raise StageOverflow(l - 1)
        return self._advance(key, p0, ids, out["h"])

    def _advance(self, key, p0: int, ids: Sequence[int], h: np.ndarray) -> np.ndarray:
        self.pos = p0 + len(ids)
        self._ids[p0:] = ids
        self._synced[key] = self.pos
        return h

    def _step_chain(self, key, stages, n: int, feeds: list[dict]) -> StepChain | None:
        """The set's layers as one native call for ``n`` live columns (built once, again after a rebinding), or
        None where the Python loop must run (:mod:`.chain`)."""
        if not self.use_chain or not same_feeds(stages, feeds):
            return None
        made = self._chains.get((key, n))                # (stages, chain or None: stages it cannot run)
        if made is None or made[0] is not stages or (made[1] is not None and not made[1].valid()):
            made = self._chains[(key, n)] = (stages, StepChain.build(stages, n))
        return made[1]

    def _guarded_block(self, ids: Sequence[int], S: int) -> np.ndarray:
        """:meth:`_block`, re-planning the residual scale (and running again) when a stage's output left
        fp16 on this text; each re-plan at least halves the scale, so this ends."""
        while True:
            try:
                return self._block(ids, S)
            except StageOverflow as e:
                self._replan(e.layer, ids)

    def _replan(self, layer: int, pending: Sequence[int]) -> None:
        """A stage overflowed at ``layer`` on the cached text + ``pending``: a smaller scale from the
        definition's float64 peaks on exactly that text (or :class:`Fp16RangeError`), every program set
        compiled again with it (stated on stderr once), and the cached text prefilled again."""
        history = list(self._ids[:self.pos])
        if self._scale_spec != "auto":
            raise Fp16RangeError(
                f"layer {layer}: a value inside the programs left fp16's range on this text with "
                f"residual_scale={self._scale_spec!r}; pass a smaller one (e.g. "
                f"residual_scale={self.residual_scale / 16:g}) or residual_scale='auto'", layer=layer,
                scale=self.residual_scale)
        new = replan(self.cfg, self.w, history + [int(t) for t in pending], self.fp16, layer)
        need = self.set_cost() * max(1, len(self.sets)) + len(self.batch_sets) * self.set_cost(regions=True)
        self.ensure_budget(need, f"re-planning the residual scale after layer {layer} overflowed fp16")
        log.warning("orion: layer %d overflowed fp16 on this text (a peak the load-time probe did not see): "
                    "residual stream now scaled by 2^%d, programs compiled again", layer, round(math.log2(new.scale)))
        self.set_fp16_plan(new)
        self.reset(max(self.T, len(history) + len(pending)))
        if history:
            self.prefill(history)

    def set_fp16_plan(self, plan) -> None:
        """Programs with another :class:`~.fp16_safety.Fp16Plan` from the next evaluation on (the current
        ones are released; the cache must be filled again)."""
        self.fp16, self.residual_scale = plan, plan.scale
        self.graph_options["fp16"] = plan
        self.drop_program_sets()
        self._drop_batch_sets()

    def _logits(self, h: np.ndarray, cols: slice) -> np.ndarray:
        """h [1, d, 1, S] fp16 -> logits [n, V] float32 for the selected columns."""
        if self.classifier == "device":
            S = h.shape[3]
            parts = [st.run({"h": h})["logits"][0, :, 0, cols] for _, _, st in self._classifier_set(S)]
            return self._softcap(np.concatenate(parts, axis=0).T.astype(np.float32))
        hh = np.ascontiguousarray(h[0, :, 0, cols], dtype=np.float16)                 # [d, n]
        z = _native.gemm_panels_f16(self._cpu_classifier(), hh, f32_out=True, trans_out=True)  # [n, 16 ceil(V/16)]
        return self._softcap(z[:, :self.cfg.vocab_size])

    def _cpu_classifier(self):
        """The CPU classifier's weight, built once (:mod:`.classifier`: fp16 panels, or int8 codes with
        ``classifier_weights="int8"``; the weights' mapped pages released as it goes)."""
        if self._wcls is None:
            self._wcls = cpu_classifier.build(self.fam.classifier_weight(self.cfg, self.w), self.classifier_weights,
                                              self.release_host_pages)
        return self._wcls

    def _softcap(self, z: np.ndarray) -> np.ndarray:
        """Final logit soft-capping (Gemma): ``cap * tanh(z / cap)``, on the host in float32."""
        cap = getattr(self.cfg, "final_softcap", None)
        if not cap:
            return z
        return (np.tanh(z / np.float32(cap)) * np.float32(cap)).astype(np.float32)

    def _grow(self, n: int) -> None:
        if n > self.T:
            self.T = self.ctx_bucket(n)
        self._host_capacity(self.T)

    def prefill(self, ids: Sequence[int], all_logits: bool = False) -> np.ndarray:
        """Appends ``ids`` to the cache; returns the logits of the last position ``[V]`` (or of every
        position, ``[n, V]``, with ``all_logits``)."""
        ids = [int(t) for t in ids]
        if not ids:
            raise InputError("prefill needs at least one token")
        self._check_ids(ids)
        self._grow(self.pos + len(ids))
        S = self._prefill_S(len(ids), self.T)
        outs = []
        for c0 in range(0, len(ids), S):
            chunk = ids[c0:c0 + S]
            h = self._guarded_block(chunk, S)
            last = c0 + S >= len(ids)
            if all_logits:
                outs.append(self._logits(h, slice(0, len(chunk))))
            elif last:
                outs.append(self._logits(h, slice(len(chunk) - 1, len(chunk))))
        logits = np.concatenate(outs, axis=0)
        return logits if all_logits else logits[-1]

    def step(self, token: int) -> np.ndarray:
        """Appends one token (decode: S = 16, token in column 0); returns its logits ``[V]``."""
        self._check_ids([token])
        self._grow(self.pos + 1)
        h = self._guarded_block([int(token)], DECODE_S)
        return self._logits(h, slice(0, 1))[0]

    def verify(self, ids: Sequence[int]) -> np.ndarray:
        """Appends up to 16 tokens in one decode eval (consecutive columns, causal); returns the logits
        after each ``[n, V]`` (speculative decoding checks drafts with them)."""
        ids = [int(t) for t in ids]
        if not 1 <= len(ids) <= DECODE_S:
            raise InputError(f"verify takes 1..{DECODE_S} tokens, got {len(ids)}")
        self._check_ids(ids)
        self._grow(self.pos + len(ids))
        h = self._guarded_block(ids, DECODE_S)
        return self._logits(h, slice(0, len(ids)))

    def rollback(self, pos: int) -> None:
        """Forgets the cache positions from ``pos`` on (rejected drafts): no copies - later tokens mask
        and overwrite them."""
        if not 0 <= pos <= self.pos:
            raise InputError(f"rollback to {pos} outside the cached positions [0, {self.pos}]")
        self.pos = pos
        del self._ids[pos:]
        self._host_pos = min(self._host_pos, pos)
        for k in self._synced:
            self._synced[k] = min(self._synced[k], pos)

    def _check_ids(self, ids) -> None:
        V = self.cfg.vocab_size
        bad = [t for t in ids if not 0 <= int(t) < V]
        if bad:
            raise InputError(f"token id(s) {bad[:5]} outside the vocabulary [0, {V})")
        if self.pos + len(ids) > self.cfg.n_ctx:
            raise InputError(f"{self.pos + len(ids)} tokens exceed the model's context of {self.cfg.n_ctx}")
