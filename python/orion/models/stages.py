"""One stage of a model as compiled programs, called by graph names: :class:`Stage` (one program; the KV
cache inputs are written in place through zero-copy surface views), :class:`SplitStage` (the parts of
a stage too big for one program, run in turn) and :class:`LayerStage` (one layer's turn on a program
that every layer shares: its weights and KV cache in surfaces of its own, bound before each eval - or its
compressed weights decoded into the program's own surfaces, models/streamed.py, and its cache copied into
the program's own surface from a host array of the cache's size, :func:`cache_copied_in`)."""

from __future__ import annotations

import numpy as np

from .. import _native
from .streamed import native_weight

__all__ = ["Stage", "SplitStage", "LayerStage", "LayerWeights", "KV_INPUT", "CACHE_INPUTS", "fed_per_eval",
           "capture_layer_weights", "streamable", "cache_copied_in"]

_NP_FLOAT = {"fp16": np.float16, "fp32": np.float32}

# A stage with weights as inputs takes its keys and values in one input, stacked on axis 1 (keys first): every
# input of a program is allocated at the largest one's size (C12) - for such a stage a weight's, megabytes -
# and each layer binds its own cache, so one cache input costs one such surface per layer instead of two.
KV_INPUT = "kv_cache"
CACHE_INPUTS = ("k_cache", "v_cache", KV_INPUT)

# A weight input of a shared program whose values are at most this many bytes and at most 1/16 of the
# program's (uniform, C12) input size is written into the program's own surface before each eval instead of
# being bound as a surface per layer: the per-channel vectors (norm weights, biases) are a few KB.
FED_MAX_BYTES = 64 * 1024

# A shared program's cache input whose [C, T] region is at most 1/this of the program's (uniform, C12) input size
# is held per layer in a host array of the cache's own size and copied into the program's own surface before each
# eval (its filled columns only, in the step chain) instead of bound as a surface per layer: a 1B model's 32 MB
# weight inputs made each layer's 0.5 MB cache cost 32 MB (480 MB at 16 layers). Copying costs at most 1/this
# of the bytes the eval reads as weights; a cache as big as the weights stays bound.
CACHE_COPY_RATIO = 4


def cache_viewable(b) -> bool:
    """A cache input whose surface holds it as an fp16 [1, C, H, >=T] block (viewed in place)."""
    ms, s = tuple(b.mil_shape), tuple(b.shape)
    return b.mil_dtype == "fp16" and len(ms) == 4 and ms[:3] == s[:3] and ms[3] >= s[3]


def cache_view(surface, b) -> np.ndarray:
    """The writable ``[C, T]`` region (``[C, H, W]`` for the 4-D caches of batch programs) of a cache
    input's surface."""
    ms, s = tuple(b.mil_shape), tuple(b.shape)
    view = surface.view("fp16", list(ms))[0, :, :, :s[3]]
    return view[:, 0] if s[2] == 1 else view


def cache_views(cache, name: str) -> dict[str, np.ndarray]:
    """``{"k_cache": ..., "v_cache": ...}`` (or the one cache input ``name`` is) as views of ``cache``, the
    region of its surface :func:`cache_view` gives or a host array of that shape: :data:`KV_INPUT` holds both."""
    if name != KV_INPUT:
        return {name: cache}
    half = cache.shape[0] // 2
    return {"k_cache": cache[:half], "v_cache": cache[half:]}


def cache_copied_in(b, alloc_size: int) -> bool:
    """Whether cache input ``b`` of a shared program (inputs of ``alloc_size`` bytes) is copied in from a host
    array before each eval rather than bound as a surface per layer (:data:`CACHE_COPY_RATIO`): a viewable
    ``[C, T]`` cache (the 4-D caches of batch programs stay bound)."""
    return (cache_viewable(b) and b.shape[2] == 1 and
            CACHE_COPY_RATIO * int(np.prod(b.mil_shape)) * 2 <= alloc_size)


def fed_per_eval(b, alloc_size: int) -> bool:
    """Whether weight input ``b`` of a shared program (whose inputs are ``alloc_size`` bytes each) is fed
    before each eval rather than bound per layer (:data:`FED_MAX_BYTES`); it must be viewable in place."""
    n = int(np.prod(b.shape)) * 2
    ms, s = tuple(b.mil_shape), tuple(b.shape)
    return (b.mil_dtype == "fp16" and len(ms) == len(s) and all(d <= m for d, m in zip(s, ms)) and
            n <= FED_MAX_BYTES and 16 * n <= alloc_size)


def _region(surface, b) -> np.ndarray:
    """The ``b.shape`` corner of input ``b``'s surface (the rest is padding, C04/C14), writable."""
    full = surface.view(b.mil_dtype, list(b.mil_shape))
    return full[tuple(slice(0, d) for d in b.shape)]


class Stage:
    """One compiled stage program, called by graph names; cache inputs are written in place."""

    def __init__(self, cp, caches: bool = True, pool: dict | None = None):
        """``caches=False``: the program's own cache surfaces are left alone (:class:`LayerStage` binds a
        cache per layer or copies it in). ``pool``: the input surfaces of the other program sets' shared
        programs ({(mil name, alloc size): surface}); this program's inputs other than weights use the pool's
        surface of the same name and size instead of their own - a shared program's inputs are weight-sized
        (C12: 32 MB each at 1B), sets never run at once, and each eval writes the columns it uses (the
        others, stale, are never live: every op of a stage is column-wise but attention, which masks)."""
        self.cp = cp
        self.prog = cp.program
        plan = cp.io_plan
        for b in plan.inputs.values() if pool is not None else ():
            if b.kind == "weight":
                continue
            own = self.prog.input_surface(b.mil_name)
            if b.name not in CACHE_INPUTS or cache_copied_in(b, own.alloc_size):
                key = (b.mil_name, own.alloc_size)
                if key in pool:
                    self.prog.bind_input(b.mil_name, pool[key])
                else:
                    pool[key] = own
        self.inputs = {n: b for n, b in plan.inputs.items() if b.kind == "activation"}
        self.outputs = dict(plan.outputs)
        # cache name -> writable [C, T] region of the surface ([C, H, W] for the 4-D caches of batch
        # programs, [1, 16 * kv_heads, R, head_dim])
        self.views: dict[str, np.ndarray] = {}
        self.host: dict[str, np.ndarray] = {}        # fallback: cache input name -> array passed with every call
        self.cache: dict[str, np.ndarray] = {}       # "k_cache" / "v_cache" -> writable [C, T] (either kind)
        for name in CACHE_INPUTS if caches else ():
            b = self.inputs.get(name)
            if b is None:
                continue
            if cache_viewable(b):
                self.prog.stage(b.mil_name, np.zeros(tuple(b.mil_shape), np.float16))
                self.views.update(cache_views(cache_view(self.prog.input_surface(b.mil_name), b), name))
            else:
                s = tuple(b.shape)
                self.host[name] = np.zeros((s[1], s[3]) if s[2] == 1 else s[1:], np.float16)
                self.cache.update(cache_views(self.host[name], name))
        self.cache.update(self.views)
        self.in_views: dict[str, np.ndarray] = {}
        self.out_views: dict[str, tuple] = {}
        self.out_arrays: dict[str, np.ndarray] = {}      # outputs whose final shape is a view of one surface
        self.fed_views: dict[str, np.ndarray] = {}   # shared programs: weight inputs fed per eval (LayerStage)
        self.spare_surfaces: dict[str, object] = {}  # shared programs: capture_layer_weights' surfaces to reuse
        self.own_surfaces: dict[str, object] = {}    # shared programs: the surfaces streamed layers decode their
        #                                              weights into (models/streamed.py), and whose weights those
        self.fill_state: dict = {"weights": None}    # hold now (shared with the programs sharing the surfaces)
        self._live: dict[int, dict] = {}
        self.zero_copy = not self.host and self._bind_views()

    def _bind_views(self) -> bool:
        """Zero-copy I/O for every input and output: inputs are written in place into their surfaces
        (padding zeroed once), outputs read through views of theirs, one ``eval`` per call - no staging
        copies or fresh arrays in the runtime layer. False (use the call API) if one cannot be viewed."""
        try:
            for name, b in self.inputs.items():
                if name in CACHE_INPUTS:
                    continue
                ms, s = tuple(b.mil_shape), tuple(b.shape)
                if b.mil_dtype not in _NP_FLOAT or len(ms) != len(s) or any(d > m for d, m in zip(s, ms)):
                    return False
                self.prog.stage(b.mil_name, np.zeros(ms, _NP_FLOAT[b.mil_dtype]))
                full = self.prog.input_surface(b.mil_name).view(b.mil_dtype, list(ms))
                self.in_views[name] = full[tuple(slice(0, d) for d in s)]
            for name, ob in self.outputs.items():
                parts = []
                for p in ob.parts:
                    if p.mil_dtype not in _NP_FLOAT:
                        return False
                    parts.append(p.from_surface(self.prog.output_surface(p.mil_name).view(p.mil_dtype,
                                                                                          list(p.mil_shape))))
                self.out_views[name] = (parts, ob)
                if len(parts) == 1:
                    arr = parts[0].view()
                    try:
                        arr.shape = tuple(ob.shape)      # raises where the shape needs a copy: reshaped per call
                        self.out_arrays[name] = arr
                    except AttributeError:
                        pass
        except Exception:  # noqa: BLE001 - a backend without surface views: the call API works everywhere
            self.in_views.clear()
            self.out_views.clear()
            self.out_arrays.clear()
            return False
        return True

    def live_columns(self, n: int | None) -> dict | None:
        """The program's live-columns hint when only the first ``n`` columns of the outputs are used."""
        if n is None:
            return None
        if n not in self._live:
            self._live[n] = self.cp.live_columns_hint(n)
        return self._live[n]

    def run(self, feed: dict, live: int | None = None, unchanged=()) -> dict:
        """Runs the stage; with zero-copy I/O the returned arrays are views of the output surfaces,
        valid until this stage runs again (callers consume them before that). ``live``: only the first
        ``live`` columns of the outputs are used (the others are then unspecified: the simulator skips
        what only they need). ``unchanged``: names in ``feed`` whose values this program's previous call
        was fed already (the mask and RoPE tables that every layer of a step shares): not copied again."""
        hint = self.live_columns(live)
        if self.zero_copy:
            views = self.in_views
            for n, a in feed.items():
                if n not in unchanged:
                    views[n][...] = a
            self.prog.eval(live_columns=hint)
            out = dict(self.out_arrays)
            for name, (parts, ob) in self.out_views.items():
                if name not in out:
                    arr = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=ob.concat_axis)
                    out[name] = arr.reshape(ob.shape)
            return out
        mil = {}
        for n, a in feed.items():
            b = self.inputs[n]
            mil[b.mil_name] = b.to_surface(a)
        for n, a in self.host.items():
            b = self.inputs[n]
            mil[b.mil_name] = b.to_surface(a.reshape(b.shape))
        raw = self.prog.run(mil, live_columns=hint)
        out = {}
        for name, ob in self.outputs.items():
            parts = [p.from_surface(np.asarray(raw[p.mil_name])) for p in ob.parts]
            arr = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=ob.concat_axis)
            out[name] = arr.reshape(ob.shape)
        return out

    @property
    def programs(self) -> list:
        return [self.cp]

    def release(self):
        self.views.clear()
        self.in_views.clear()
        self.out_views.clear()
        self.cp.release()


class SplitStage:
    """A stage run as several programs in turn (the parts of the family's ``stage_graph``) when one
    program cannot hold all of its weights (C18); same interface as :class:`Stage`. Each part takes
    the previous part's residual output as ``x``; the KV cache lives in the attention part."""

    def __init__(self, parts: list[Stage]):
        self.parts = parts
        self.cache = next((p.cache for p in parts if p.cache), {})

    @property
    def programs(self) -> list:
        return [p.cp for p in self.parts]

    def run(self, feed: dict, live: int | None = None, unchanged=()) -> dict:
        out: dict = {}                                   # (a split stage's programs are its own: no feed is kept)
        x = feed["x"]
        for p in self.parts:
            o = p.run({"x": x, **{n: a for n, a in feed.items() if n in p.inputs and n != "x"}}, live)
            x = o.get("x_mid", o.get("x_out", x))
            out.update(o)
        out.pop("x_mid", None)
        return out

    def release(self):
        for p in self.parts:
            p.release()


class LayerWeights:
    """One layer's values of a shared program's weight inputs, in the program's layout: ``surfaces`` ({mil
    input name: Surface}, bound before each eval), ``fed`` ({mil input name: array}: the inputs
    :func:`fed_per_eval` picks, written into the program's own surface before each eval) and ``streamed``
    ({mil input name: [(native CompressedWeight, its region of the input's surface: (first panel, panels),
    panel width)]}: inputs whose every weight is compressed, decoded into the program's own surface before each
    eval - models/streamed.py) and ``panels`` (of those, {mil input name: Surface}: where the program's panel GEMMs
    read the compressed weights themselves - the simulator's -, a surface of the layer's own whose panels stand
    for its bytes (``Surface.set_panels``), bound like ``surfaces`` and never written: no decode before the eval)."""

    __slots__ = ("checked", "fed", "panels", "streamed", "surfaces")

    def __init__(self, surfaces: dict, fed: dict, streamed: dict | None = None, panels: dict | None = None,
                 checked: dict | None = None):
        self.surfaces, self.fed, self.streamed, self.panels = surfaces, fed, streamed or {}, panels or {}
        # {mil input name of `streamed`: the signature its decode was checked under (_stream_signature)}
        self.checked = checked or {}

    @property
    def nbytes(self) -> int:
        """Bytes of its fp16 surfaces and fed arrays, and what its panel surfaces keep resident (the streamed
        weights: :attr:`streamed_bytes`)."""
        return sum(s.alloc_size for s in self.surfaces.values()) + sum(int(a.nbytes) for a in self.fed.values()) + \
            sum(int(s.resident_bytes) for s in self.panels.values())

    @property
    def streamed_bytes(self) -> int:
        """Bytes of its streamed weights as the kernels hold them (codes and tables / scales)."""
        return sum(int(cw.nbytes) for parts in self.streamed.values() for cw, _, _ in parts)


class LayerStage:
    """One layer's turn on a stage program that every layer shares (weights as program inputs): the
    layer's weights - staged once through the program's own ``set_weights`` into surfaces of their own
    (:func:`capture_layer_weights`) - and its KV cache surface are bound to the program before each eval
    (pointer swaps, no copies); the few-KB inputs :func:`fed_per_eval` picks are written into the program's own
    surfaces instead, as is a cache much smaller than those surfaces (:func:`cache_copied_in`: the layer holds it
    in a host array). Same interface as :class:`Stage` (``base``: the program's, built with ``caches=False``);
    ``owner`` (one per shared program) releases the program; ``build`` ((S, T, more stage_graph arguments))
    and ``lora`` (the adapter slots it was compiled with) say how to capture the layer's weights again."""

    def __init__(self, base: Stage, layer: int, weights: LayerWeights, owner: bool = False, build=None, lora=None,
                 cache_pool: dict | None = None):
        self.base, self.layer, self.owner, self.build, self.lora = base, layer, owner, build, lora
        self.views: dict[str, np.ndarray] = {}
        self.caches: dict[str, object] = {}          # mil name -> the layer's cache surface, bound before each eval
        self.host_caches: dict[str, np.ndarray] = {}  # mil name -> the layer's cache, copied in before each eval
        self.copy_in: list[tuple] = []               # (host cache, its region of the program's own surface)
        for name in CACHE_INPUTS:
            b = base.inputs.get(name)
            if b is None:
                continue
            if not cache_viewable(b):
                raise ValueError("a shared stage program needs its caches viewable in place")
            own = base.prog.input_surface(b.mil_name)
            size = own.alloc_size
            # ``cache_pool``: the layer's caches of the other program sets, by layout - sets whose cache inputs
            # are laid out alike (prefill and decode of one context bucket) hold position p at the same place,
            # so they share one cache instead of a copy each
            copied = cache_copied_in(b, size)
            key = (layer, name, tuple(b.mil_shape), b.mil_dtype, "host" if copied else size)
            held = cache_pool.get(key) if cache_pool is not None else None
            if copied:                        # as the surface holds it: [C, T padded], of which T columns used
                region = cache_view(own, b)
                if held is None:
                    held = np.zeros((b.mil_shape[1], b.mil_shape[3]), np.float16)
                self.host_caches[b.mil_name] = held
                cache = held[:, :region.shape[1]]
                self.copy_in.append((cache, region))
            else:
                if held is None:
                    held = base.prog.new_surface(size)    # the backend's kind: an IOSurface on the ANE
                self.caches[b.mil_name] = held
                cache = cache_view(held, b)
            if cache_pool is not None:
                cache_pool[key] = held
            self.views.update(cache_views(cache, name))
        self.cache = self.views
        self.inputs = base.inputs
        self.set_weights(weights)

    def set_weights(self, weights: LayerWeights) -> None:
        """This layer's weights from now on (:func:`capture_layer_weights` on this program)."""
        self.weights = weights
        base = self.base
        native = base.prog._p
        # streamed: decoded into the program's own surface, or read where they are (a surface with panels)
        own = {n: base.own_surfaces[n] for n in weights.streamed if n not in weights.panels}
        self._bind = [(native.input_slot(n), s)
                      for n, s in {**weights.surfaces, **weights.panels, **own, **self.caches}.items()]
        self._feed = [(base.fed_views[n], a) for n, a in weights.fed.items()]
        self._fill = []                      # (CompressedWeight, destination panels, width): LayerStage.run, chains
        for n, parts in weights.streamed.items():
            if n in weights.panels:
                continue
            view = _own_panels(base, n)
            self._fill += [(cw, view[p0:p0 + np_], w) for cw, (p0, np_), w in parts]

    @property
    def surface_bytes(self) -> int:
        """Bytes of this layer's weights (its caches excluded)."""
        return self.weights.nbytes

    def run(self, feed: dict, live: int | None = None, unchanged=()) -> dict:
        bind = self.base.prog._p.bind_input
        for slot, surf in self._bind:
            bind(slot, surf)
        state = self.base.fill_state
        if self._fill and state["weights"] is not self.weights:
            for cw, dst, width in self._fill:
                cw.panels_into(dst, width)
            state["weights"] = self.weights
        for view, values in self._feed:
            view[...] = values
        for held, region in self.copy_in:
            region[...] = held
        return self.base.run(feed, live, unchanged)

    @property
    def programs(self) -> list:
        return [self.base.cp] if self.owner else []

    def release(self):
        self.views.clear()
        self.caches.clear()
        self.host_caches.clear()
        self.copy_in = []
        self._bind, self._feed, self._fill = [], [], []
        if self.owner:
            self.base.release()


def _same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Bit for bit (-0 is not 0 here); strided views too (compared as unsigned ints of their own size)."""
    bits = np.dtype(f"u{a.itemsize}")
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a.view(bits), b.view(bits))


def streamable(io, stored: dict, natives: dict) -> dict:
    """The weight inputs of a program (``io``: its IOPlan) whose every weight is a compressed weight stored in a
    column-panel layout: {mil input name: [(native CompressedWeight, (first panel, panels), width)]}
    (models/streamed.py); ``natives``: id(QuantizedArray) -> (it, its native form), shared by the program sets
    (one copy a weight)."""
    members: dict[str, list] = {}
    for name, dw in io.dynamic.items():
        members.setdefault(dw.input_key, []).append((name, dw))
    out = {}
    for key, ms in members.items():
        parts = []
        for name, dw in ms:
            qa = stored.get(name)
            if qa is None or dw.layout != "conv_p" or (dw.pack_axis != 1 and len(ms) > 1):
                break
            hit = natives.get(id(qa))
            if hit is None:
                hit = natives[id(qa)] = (qa, native_weight(qa))
            if hit[1] is None:
                break
            parts.append((hit[1], (dw.offset, dw.surface_shape[1]), dw.surface_shape[3]))
        else:
            out[io.inputs[key].mil_name] = parts
    return out


def capture_layer_weights(base: Stage, values, reuse: LayerWeights | None = None, natives: dict | None = None,
                          pool: dict | None = None) -> LayerWeights:
    """Stages ``values`` (every dynamic weight of the shared program ``base``, graph name -> array) through the
    program's ``set_weights`` into new surfaces bound to its weight inputs - one layer's weights in the program's
    own layout (packed inputs included), no copy - and returns them; the inputs :func:`fed_per_eval` picks are
    staged into the program's own surfaces and kept as small arrays. A layer's bound surface is never written.

    ``values`` may be a function returning them, called once the new surfaces are allocated: the long-lived
    surfaces then lie below the values' temporaries (decoded weights, layout copies) on the heap, which shrinks
    back when those are freed instead of keeping them as holes between one layer's surfaces and the next's.
    ``reuse``: the same layer's weights captured before (program sets of other sequence lengths hold the same
    values); a surface or array with the same name, size and bytes is kept instead, and the new surface kept
    in ``base.spare_surfaces`` for the next capture (the caller clears it after the last).

    ``natives`` (streaming, models/streamed.py): the values' ``stored`` ({graph name: QuantizedArray}, the
    weights as stored) name the compressed ones; an input holding only such weights gets no surface of its own
    but is decoded into the program's own surface before each eval - kept only where that decode gives the
    staged values bit for bit. ``pool``: surfaces to decode into that programs with the same weight inputs share
    ({(mil name, shape, dtype, size): surface}; never two programs' evals at once)."""
    cp, prog = base.cp, base.prog
    inputs = [b for b in cp.io_plan.inputs.values() if b.kind == "weight"]
    if not inputs:
        return LayerWeights({}, {})
    base.fill_state["weights"] = None                    # staging below may write the program's own surfaces
    alloc = prog.input_surface(inputs[0].mil_name).alloc_size
    stream: dict = {}
    known: set = set()       # streamed inputs whose decode another program set's capture of this layer checked
    if natives is not None:
        values = values() if callable(values) else values
        stream = streamable(cp.io_plan, getattr(values, "stored", {}), natives)
    fresh = {}
    for b in inputs:
        if b.mil_name not in base.fed_views and fed_per_eval(b, alloc):
            base.fed_views[b.mil_name] = _region(prog.input_surface(b.mil_name), b)
        if b.mil_name in stream and b.mil_name not in base.fed_views:
            if b.mil_name not in base.own_surfaces:      # the program's own surface, or the pool's like it
                key = (b.mil_name, tuple(b.mil_shape), b.mil_dtype, alloc)
                own = pool.setdefault(key, prog.input_surface(b.mil_name)) if pool is not None else \
                    prog.input_surface(b.mil_name)
                base.own_surfaces[b.mil_name] = own
                if pool is not None:
                    base.fill_state = pool.setdefault("fill_state", {"weights": None})
            prog.bind_input(b.mil_name, base.own_surfaces[b.mil_name])
        elif b.mil_name not in base.fed_views:
            # a surface left over by a capture that kept the old one (same input: its padding is still zero)
            spare = base.spare_surfaces.pop(b.mil_name, None)
            fresh[b.mil_name] = spare if spare is not None else prog.new_surface(alloc)
            prog.bind_input(b.mil_name, fresh[b.mil_name])
    if reuse is not None:
        known = {name for name, parts in stream.items() if name not in base.fed_views and
                 reuse.checked.get(name) == _stream_signature(base, name, parts, alloc)}
    values = values() if callable(values) else values
    mil_of = {n: cp.io_plan.inputs[dw.input_key].mil_name for n, dw in cp.io_plan.dynamic.items()}
    # a known input is not staged again: the check below would compare the same bytes
    cp.set_weights(**{n: a for n, a in values.items() if mil_of.get(n) not in known})
    streamed, checked = {}, {}
    for name, parts in stream.items():
        if name in base.fed_views:
            continue
        if name in known:
            streamed[name], checked[name] = parts, reuse.checked[name]
            continue
        view = _own_panels(base, name)
        exact = True
        for cw, (p0, n), width in parts:
            got = np.zeros_like(view[p0:p0 + n])          # padding past the panel width stays zero
            cw.panels_into(got, width)
            exact = exact and _same_bytes(got, view[p0:p0 + n])
        if exact:
            streamed[name], checked[name] = parts, _stream_signature(base, name, parts, alloc)
        else:                                            # not the staged values: this layer keeps a surface
            fresh[name] = prog.new_surface(alloc)
            fresh[name].view("uint8")[...] = base.own_surfaces[name].view("uint8")
            prog.bind_input(name, fresh[name])
    old = reuse or LayerWeights({}, {})
    surfaces, fed = {}, {}
    for name, s in fresh.items():
        o = old.surfaces.get(name)
        if o is not None and o.alloc_size == s.alloc_size and _same_bytes(o.view("uint8"), s.view("uint8")):
            prog.bind_input(name, o)
            base.spare_surfaces[name], s = s, o      # for the next capture: no allocation per layer, no churn
        surfaces[name] = s
    for name, view in base.fed_views.items():
        o = old.fed.get(name)
        fed[name] = o if o is not None and _same_bytes(o, view) else view.copy()
    panels = {}
    for name, parts in streamed.items():                 # where the program reads the compressed weights themselves
        if prog._p.reads_panels(prog._p.input_slot(name)):
            o = old.panels.get(name)
            same = o is not None and o.alloc_size == alloc and _parts_key(parts) == _parts_key(old.streamed[name])
            panels[name] = o if same else _panel_surface(base, name, parts, alloc)
            if name not in known:
                base.own_surfaces[name].zero()     # the staged values were only for the check above: pages back
    return LayerWeights(surfaces, fed, streamed, panels, checked)


def _stream_signature(base: Stage, mil_name: str, parts: list, alloc: int) -> tuple:
    """What a streamed input's decode check depends on: the compressed weights (by identity: one native form a
    weight, shared by the program sets), where each goes in the input's column panels, and those panels' shape."""
    return _parts_key(parts), _own_panels(base, mil_name).shape, alloc


def _parts_key(parts: list) -> tuple:
    """A streamed input's parts as comparable values: each native weight by identity (one a weight, shared by the
    program sets), its region and width."""
    return tuple((id(cw), r, w) for cw, r, w in parts)


def _panel_surface(base: Stage, mil_name: str, parts: list, alloc: int):
    """A surface of ``alloc`` bytes for streamed input ``mil_name`` whose panels stand for its bytes: each part's
    compressed weight at its first panel's byte offset in the input's column panels. Mapped zero pages whatever
    its size: only the simulator reads panels, and it never writes them (nor touches the bytes)."""
    _, K, ld = _own_panels(base, mil_name).shape
    surface = _native.Surface(alloc, mapped=True)
    surface.set_panels([(cw, p0 * K * ld * 2, width, ld) for cw, (p0, _), width in parts])
    return surface


def _own_panels(base: Stage, mil_name: str) -> np.ndarray:
    """Streamed input ``mil_name``'s surface in ``base.own_surfaces`` as its column panels [P, K, padded width]."""
    b = next(b for b in base.cp.io_plan.inputs.values() if b.mil_name == mil_name)
    return base.own_surfaces[mil_name].view("fp16", list(b.mil_shape))[0]
