"""One stage of a model as compiled programs, called by graph names: :class:`Stage` (one program; the KV
cache inputs are written in place through zero-copy surface views) and :class:`SplitStage` (the parts of
a stage too big for one program, run in turn)."""

from __future__ import annotations

import numpy as np

__all__ = ["Stage", "SplitStage"]

_NP_FLOAT = {"fp16": np.float16, "fp32": np.float32}


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
            ms, s = tuple(b.mil_shape), tuple(b.shape)
            if b.mil_dtype == "fp16" and len(ms) == 4 and ms[:3] == s[:3] and ms[3] >= s[3]:
                self.prog.stage(b.mil_name, np.zeros(ms, np.float16))
                view = self.prog.input_surface(b.mil_name).view("fp16", list(ms))[0, :, :, :s[3]]
                self.views[name] = view[:, 0] if s[2] == 1 else view
            else:
                self.host[name] = np.zeros((s[1], s[3]) if s[2] == 1 else s[1:], np.float16)
        self.cache = {**self.views, **self.host}
        self.in_views: dict[str, np.ndarray] = {}
        self.out_views: dict[str, tuple] = {}
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
        except Exception:  # noqa: BLE001 - a backend without surface views: the call API works everywhere
            self.in_views.clear()
            self.out_views.clear()
            return False
        return True

    def live_columns(self, n: int | None) -> dict | None:
        """The program's live-columns hint when only the first ``n`` columns of the outputs are used."""
        if n is None:
            return None
        if n not in self._live:
            self._live[n] = self.cp.live_columns_hint(n)
        return self._live[n]

    def run(self, feed: dict, live: int | None = None) -> dict:
        """Runs the stage; with zero-copy I/O the returned arrays are views of the output surfaces,
        valid until this stage runs again (callers consume them before that). ``live``: only the first
        ``live`` columns of the outputs are used (the others are then unspecified: the simulator skips
        what only they need)."""
        hint = self.live_columns(live)
        if self.zero_copy:
            for n, a in feed.items():
                self.in_views[n][...] = a
            self.prog.eval(live_columns=hint)
            out = {}
            for name, (parts, ob) in self.out_views.items():
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

    def run(self, feed: dict, live: int | None = None) -> dict:
        out: dict = {}
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
