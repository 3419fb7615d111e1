"""One stage of a model as compiled programs, called by graph names: :class:`Stage` (one program; the KV
cache inputs are written in place through zero-copy surface views), :class:`SplitStage` (the parts of
a stage too big for one program, run in turn) and :class:`LayerStage` (one layer's turn on a program
that every layer shares: its weights and KV cache in surfaces of its own, bound before each eval)."""

from __future__ import annotations

import numpy as np

from .. import _native

__all__ = ["Stage", "SplitStage", "LayerStage"]

_NP_FLOAT = {"fp16": np.float16, "fp32": np.float32}


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


class Stage:
    """One compiled stage program, called by graph names; cache inputs are written in place."""

    def __init__(self, cp):
        self.cp = cp
        self.prog = cp.program
        plan = cp.io_plan
        self.inputs = {n: b for n, b in plan.inputs.items() if b.kind == "activation"}
        self.outputs = dict(plan.outputs)
        # cache name -> writable [C, T] region of the surface ([C, H, W] for the 4-D caches of batch
        # programs, [1, 16 * kv_heads, R, head_dim])
        self.views: dict[str, np.ndarray] = {}
        self.host: dict[str, np.ndarray] = {}        # fallback: cache passed with every call
        for name in ("k_cache", "v_cache"):
            b = self.inputs.get(name)
            if b is None:
                continue
            if cache_viewable(b):
                self.prog.stage(b.mil_name, np.zeros(tuple(b.mil_shape), np.float16))
                self.views[name] = cache_view(self.prog.input_surface(b.mil_name), b)
            else:
                s = tuple(b.shape)
                self.host[name] = np.zeros((s[1], s[3]) if s[2] == 1 else s[1:], np.float16)
        self.cache = {**self.views, **self.host}
        self.in_views: dict[str, np.ndarray] = {}
        self.out_views: dict[str, tuple] = {}
        self.out_arrays: dict[str, np.ndarray] = {}      # outputs whose final shape is a view of one surface
        self._live: dict[int, dict] = {}
        self.zero_copy = not self.host and self._bind_views()

    def _bind_views(self) -> bool:
        """Zero-copy I/O for every input and output: inputs are written in place into their surfaces
        (padding zeroed once), outputs read through views of theirs, one ``eval`` per call - no staging
        copies or fresh arrays in the runtime layer. False (use the call API) if one cannot be viewed."""
        try:
            for name, b in self.inputs.items():
                if name in self.cache:
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


class LayerStage:
    """One layer's turn on a stage program that every layer shares (weights as program inputs): the
    layer's weights - staged once through the program's own ``set_weights`` and copied into surfaces of
    their own (:func:`capture_weight_surfaces`) - and its KV cache surfaces are bound to the program
    before each eval (pointer swaps, no copies). Same interface as :class:`Stage`; ``owner`` (one per
    shared program) releases the program; ``build`` ((S, T, more stage_graph arguments)) and ``lora`` (the
    adapter slots it was compiled with) say how to capture the layer's weights again."""

    def __init__(self, base: Stage, layer: int, weight_surfaces: dict, owner: bool = False, build=None, lora=None,
                 cache_pool: dict | None = None):
        if base.host:
            raise ValueError("a shared stage program needs its caches viewable in place")
        self.base, self.layer, self.owner, self.build, self.lora = base, layer, owner, build, lora
        self.views: dict[str, np.ndarray] = {}
        self.caches: dict[str, object] = {}
        for name in ("k_cache", "v_cache"):
            b = base.inputs.get(name)
            if b is None:
                continue
            size = base.prog.input_surface(b.mil_name).alloc_size
            # ``cache_pool``: the layer's cache surfaces of the other program sets, by layout - sets whose cache
            # inputs are laid out alike (prefill and decode of one context bucket) hold position p at the same
            # place, so they share one surface instead of a copy each
            key = (layer, name, tuple(b.mil_shape), b.mil_dtype, size)
            surf = cache_pool.get(key) if cache_pool is not None else None
            if surf is None:
                surf = _native.Surface(size)
                surf.view("uint8")[...] = 0
                if cache_pool is not None:
                    cache_pool[key] = surf
            self.caches[b.mil_name] = surf
            self.views[name] = cache_view(surf, b)
        self.cache = self.views
        self.inputs = base.inputs
        self.set_weights(weight_surfaces)

    def set_weights(self, weight_surfaces: dict) -> None:
        """This layer's weight surfaces from now on (``{mil input name: Surface}``)."""
        self.weights = dict(weight_surfaces)
        native = self.base.prog._p
        self._bind = [(native.input_slot(n), s) for n, s in {**self.weights, **self.caches}.items()]

    @property
    def surface_bytes(self) -> int:
        """Bytes of this layer's weight surfaces (its caches excluded)."""
        return sum(s.alloc_size for s in self.weights.values())

    def run(self, feed: dict, live: int | None = None, unchanged=()) -> dict:
        bind = self.base.prog._p.bind_input
        for slot, surf in self._bind:
            bind(slot, surf)
        return self.base.run(feed, live, unchanged)

    def follows(self, other) -> bool:
        """Whether this layer's turn runs the program ``other`` ran last (the previous layer's turn on
        the shared program): inputs fed to both alike need not be copied again."""
        return isinstance(other, LayerStage) and other.base is self.base

    @property
    def programs(self) -> list:
        return [self.base.cp] if self.owner else []

    def release(self):
        self.views.clear()
        self.caches.clear()
        self._bind = []
        if self.owner:
            self.base.release()


def capture_weight_surfaces(base: Stage, values: dict, reuse: dict | None = None) -> dict:
    """Stages ``values`` (every dynamic weight of the shared program ``base``, graph name -> array) into its
    weight inputs and returns copies of those input surfaces, ``{mil input name: Surface}``: one layer's
    weights in the program's own layout (packed inputs included). The program's own surfaces are bound
    back first (a layer's bound surface must never be written). ``reuse``: the same layer's surfaces
    captured before; one with the same name, size and bytes is kept instead of a new copy (program sets
    of other sequence lengths hold the same weights)."""
    cp, prog = base.cp, base.prog
    if not hasattr(base, "own_weight_surfaces"):       # before any layer's surfaces were bound
        base.own_weight_surfaces = {b.mil_name: prog.input_surface(b.mil_name)
                                    for b in cp.io_plan.inputs.values() if b.kind == "weight"}
    for name, surf in base.own_weight_surfaces.items():
        prog.bind_input(name, surf)
    cp.set_weights(**values)
    out = {}
    for name, src in base.own_weight_surfaces.items():
        data = src.view("uint8")
        old = (reuse or {}).get(name)
        if old is not None and old.alloc_size == src.alloc_size and np.array_equal(old.view("uint8"), data):
            out[name] = old
            continue
        dst = _native.Surface(src.alloc_size)
        dst.view("uint8")[...] = data
        out[name] = dst
    return out
