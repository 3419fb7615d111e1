"""``CompiledProgram``: a runtime Program that speaks the graph's names and shapes.

Callers pass and receive numpy arrays by graph name, in the shapes they declared; the program pads
and unpads surfaces, converts dtypes (host-side fp32 on M1/M2), joins outputs split into several
program results, and never exposes slot order (the runtime binds by MIL name, C03/C13).

Weight updates: ``set_weights(name=array)`` writes dynamic weights into their staged input surfaces
(no compile, no reload: ``orion.counters()`` shows zero compiles); baked weights are updated by a new
compile from the source graph, which charges the per-process compile budget (C05/C07).
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from typing import Mapping, NamedTuple

import numpy as np

from .. import _html
from ..errors import InputError, ProgramStateError, WeightUpdateError
from ..fileio import atomic_folder, read_json
from .lowered import Lowered
from .passes.check_weights import rounds_finite
from .passes.context import (
    CompileOptions, CompileWarning, DynamicWeight, InputBinding, IOPlan, OutputBinding, OutputPart,
)
from ..native.runtime import compile_mil, counters

__all__ = ["CompiledProgram", "Spec", "load"]

FORMAT_VERSION = 1
_NP = {"fp16": np.dtype(np.float16), "fp32": np.dtype(np.float32)}


class Spec(NamedTuple):
    """A user-facing input or output: graph name, numpy dtype, shape."""
    name: str
    dtype: np.dtype
    shape: tuple


def _check_array(what: str, name: str, arr, shape: tuple) -> np.ndarray:
    if not isinstance(arr, np.ndarray):
        try:
            arr = np.asarray(arr)
        except Exception as e:  # noqa: BLE001
            raise InputError(f"{what} {name!r}: cannot convert {type(arr).__name__} to an array ({e})") from None
    if arr.dtype.kind != "f":
        raise InputError(f"{what} {name!r}: expected a floating-point array (float16/float32), got dtype {arr.dtype}")
    if tuple(arr.shape) != tuple(shape):
        raise InputError(f"{what} {name!r}: expected shape {list(shape)}, got {list(arr.shape)}")
    return arr


class CompiledProgram:
    """A graph compiled and loaded on a device. ``prog(x=...)`` → ``{output name: array}``."""

    def __init__(self, program, lowered, source=None, recompile_args: dict | None = None, compile_fn=None):
        self._prog = program
        self._io: IOPlan = lowered.io
        self.mil: str = lowered.mil
        self._weight_files: dict[str, bytes] | None = dict(lowered.weights)
        self._keep_files = True
        self.target: str = lowered.options.target
        self.stats = lowered.stats
        self._non_finite = lowered.options.non_finite
        self._source = source
        self._recompile_args = recompile_args or {}
        self._compile_fn = compile_fn          # orion.compile, handed in by it (no import back into the compiler)
        self._dynamic: dict[str, np.ndarray] = {}
        self._keep_dynamic = True                  # drop_host_weights: no host copy of staged values
        self._packed: dict[str, np.ndarray] = {}
        self._activations = {n: b for n, b in self._io.inputs.items() if b.kind == "activation"}
        initial = {n: dw.initial for n, dw in self._io.dynamic.items() if dw.initial is not None}
        if initial:
            self._stage(initial)

    # -- description ------------------------------------------------------------------------------
    @property
    def inputs(self) -> list[Spec]:
        return [Spec(b.name, _NP[b.dtype], tuple(b.shape)) for b in self._activations.values()]

    @property
    def outputs(self) -> list[Spec]:
        return [Spec(b.name, _NP[b.dtype], tuple(b.shape)) for b in self._io.outputs.values()]

    @property
    def dynamic_weights(self) -> list[str]:
        return list(self._io.dynamic)

    @property
    def io_plan(self) -> IOPlan:
        """How user names map to MIL parameters/results (padding, packing, splits)."""
        return self._io

    @property
    def program(self):
        """The underlying runtime Program (MIL names, surfaces)."""
        return self._check_alive()

    @property
    def device(self) -> str:
        return self._check_alive().device

    @property
    def weights(self) -> dict[str, bytes]:
        """The MILBlob weight files as compiled (``{"@model_path/...": bytes}``)."""
        return dict(self._files("read the weight files"))

    def drop_weight_files(self) -> None:
        """Frees the host copy of the weight files (as large as the weights; the runtime keeps what it
        needs to run). Afterwards ``weights`` and :meth:`save` raise; evaluation, staging and recompiles
        from the source graph are unaffected. The generation engine calls this for every program."""
        self._keep_files = False
        self._weight_files = None

    def drop_host_weights(self) -> None:
        """Frees every host copy of the weights' values - the dynamic weights' compile-time and last staged
        values (packed inputs' too), the source graph kept for recompiles - leaving them in the program's surfaces
        only. Afterwards ``set_weights`` of dynamic weights still works (nothing is recorded; a packed input's other
        members are read back from its surface); :meth:`get_weight`, :meth:`save` and updates of baked weights
        raise. The generation engine calls this for its programs with weights as
        inputs, whose values are each layer's, held in that layer's surfaces."""
        self._keep_dynamic = False
        self._dynamic.clear()
        self._packed.clear()
        self._source = None
        for dw in self._io.dynamic.values():
            dw.initial = None

    def _files(self, what: str) -> dict[str, bytes]:
        if self._weight_files is None:
            raise ProgramStateError(f"cannot {what}: this program's weight files were dropped to save memory "
                                    f"(drop_weight_files); compile the graph again to get them")
        return self._weight_files

    def __repr__(self) -> str:
        def fmt(specs):
            return ", ".join(f"{s.name}: {s.dtype.name}{list(s.shape)}" for s in specs)
        state = "released" if self._prog is None else self._prog.device
        dyn = f" dynamic_weights=[{', '.join(self._io.dynamic)}]" if self._io.dynamic else ""
        return (f"<orion.CompiledProgram {self.target} on {state}: inputs=({fmt(self.inputs)}) "
                f"outputs=({fmt(self.outputs)}){dyn} mil={len(self.mil.splitlines())} lines>")

    def _repr_html_(self) -> str:  # notebooks (never raises: a released program still describes itself)
        prog = self._prog
        slot_in = {s.name: i for i, s in enumerate(prog.inputs)} if prog is not None else {}
        slot_out = {s.name: i for i, s in enumerate(prog.outputs)} if prog is not None else {}

        def where(mil_names, slots):
            return ", ".join(f"{m} (slot {slots[m]})" if m in slots else m for m in mil_names)

        rows = [("in", s.name, s.dtype.name, list(s.shape), where([self._activations[s.name].mil_name], slot_in))
                for s in self.inputs]
        rows += [("weight", n, "fp16", list(dw.user_shape), where([self._io.inputs[dw.input_key].mil_name], slot_in))
                 for n, dw in self._io.dynamic.items()]
        rows += [("out", s.name, s.dtype.name, list(s.shape),
                  where([p.mil_name for p in self._io.outputs[s.name].parts], slot_out)) for s in self.outputs]
        if prog is None:
            info = [("state", "released")]
        else:
            c = prog.cost
            info = [("identifier", prog.identifier), ("target", self.target),
                    ("device", f"{prog.device} ({getattr(prog.sim_profile, 'chip', '?')} profile), {prog.state}"),
                    ("modelled cost", f"{c['est_ms']:.4f} ms per eval, {c['flops']:,.0f} flops (profile() per op)")]
            info.append(("process counters", ", ".join(f"{k} {v}" for k, v in counters().items())))
        files = self._weight_files
        info.append(("program", f"{len(self.mil.splitlines())} MIL lines, " + (
            f"{len(files)} weight file(s), {sum(len(b) for b in files.values()):,} bytes" if files is not None
            else "weight files dropped")))
        return (_html.title("orion.CompiledProgram", self._source.name if self._source is not None else None,
                            f"({self.target})")
                + _html.items(info)
                + _html.table(("", "name", "dtype", "shape", "MIL name (ANE slot)"), rows, code_cols=(1, 4))
                + "<div>ANE slots: alphabetical order of the MIL names (C03/C13); the runtime binds by name.</div>")

    def profile(self):
        """The cost model per op of the compiled program (:meth:`orion.native.runtime.Program.profile`): MIL ops
        (after the compiler's passes) with flops, bytes and modelled time; ``sum(est_ms)`` is ``cost["est_ms"]``."""
        table = self._check_alive().profile()
        table.title = "orion.CompiledProgram.profile()"
        return table

    # -- calling ----------------------------------------------------------------------------------
    def _check_alive(self):
        if self._prog is None:
            raise ProgramStateError("this CompiledProgram was released")
        return self._prog

    def __call__(self, **arrays) -> dict[str, np.ndarray]:
        return self.run(arrays)

    def live_columns_hint(self, n: int | None) -> dict | None:
        """The runtime's ``live_columns`` hint (by MIL output) saying that only the first ``n`` entries of the
        last axis (the columns) of every graph output are used: widened outputs hold column j at j*k."""
        if n is None:
            return None
        hint = {}
        for ob in self._io.outputs.values():
            cols_split = len(ob.parts) > 1 and ob.concat_axis in (-1, len(ob.shape) - 1)
            for p in ob.parts:
                m = int(n)
                for step in p.unpad:
                    if step[0] == "widen":        # every column repeated k times on the last axis
                        m *= step[1]
                hint[p.mil_name] = -1 if cols_split else m
        return hint

    def run(self, inputs: Mapping[str, np.ndarray], live_columns: int | None = None) -> dict[str, np.ndarray]:
        """``live_columns``: only the first n columns (last axis) of the outputs are used; the rest of
        them is unspecified and the simulator skips what only they need (see ``Program.eval``)."""
        prog = self._check_alive()
        unknown = [k for k in inputs if k not in self._activations]
        if unknown:
            hint = [k for k in unknown if k in self._io.dynamic]
            extra = f" ({', '.join(hint)}: dynamic weight(s), use set_weights)" if hint else ""
            raise InputError(f"unknown input name(s) {unknown}{extra}; this program takes "
                             f"{sorted(self._activations)}")
        missing = [k for k in self._activations if k not in inputs]
        if missing:
            raise InputError(f"missing input(s) {missing}; this program takes {sorted(self._activations)}")
        feed = {}
        for name, b in self._activations.items():
            arr = _check_array("input", name, inputs[name], b.shape)
            feed[b.mil_name] = b.to_surface(arr)
        raw = prog.run(feed, live_columns=self.live_columns_hint(live_columns))
        return {name: self._assemble(ob, raw) for name, ob in self._io.outputs.items()}

    @staticmethod
    def _assemble(ob: OutputBinding, raw: dict) -> np.ndarray:
        pieces = [p.from_surface(np.asarray(raw[p.mil_name])) for p in ob.parts]
        out = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=ob.concat_axis)
        return np.ascontiguousarray(out.reshape(ob.shape), dtype=_NP[ob.dtype])

    # -- weights ----------------------------------------------------------------------------------
    def _check_weight(self, name: str, arr, shape) -> np.ndarray:
        arr = _check_array("weight", name, arr, shape)
        if not rounds_finite(arr):
            msg = f"weight {name!r}: contains NaN/inf or values beyond the fp16 range +-65504 [C37]"
            if self._non_finite == "error":
                raise InputError(msg)
            warnings.warn(msg, CompileWarning, stacklevel=3)
        return arr

    def _stage(self, values: dict[str, np.ndarray]) -> None:
        prog = self._check_alive()
        touched: dict[str, None] = {}
        for name, arr in values.items():
            dw: DynamicWeight = self._io.dynamic[name]
            surf = dw.to_surface(arr)
            b: InputBinding = self._io.inputs[dw.input_key]
            if tuple(b.shape) == tuple(dw.surface_shape):
                prog.stage(b.mil_name, b.to_surface(surf))
            else:                                   # packed with other weights
                host = self._packed.get(dw.input_key) if self._keep_dynamic else touched.get(dw.input_key)
                if host is None:   # fp16: a float64 weight rounds once, as an unpacked one does
                    # the input's values as its bound surface holds them now (zeros on a fresh one): the members
                    # not given keep theirs; a host copy is kept between calls only until drop_host_weights
                    host = self._bound_values(prog, b)
                    if self._keep_dynamic:
                        self._packed[dw.input_key] = host
                dw.place(host, surf)
                touched[dw.input_key] = host
            if self._keep_dynamic:
                self._dynamic[name] = np.array(arr, copy=True)
        for key, host in touched.items():
            b = self._io.inputs[key]
            prog.stage(b.mil_name, b.to_surface(host))

    @staticmethod
    def _bound_values(prog, b: InputBinding) -> np.ndarray:
        """A copy of input ``b``'s values (its user shape, fp16) as the surface bound to it holds them."""
        view = prog.input_surface(b.mil_name).view("fp16", [int(d) for d in b.mil_shape])
        return np.array(view[tuple(slice(0, int(d)) for d in b.shape)], dtype=np.float16)

    def set_weights(self, **arrays) -> None:
        """Update weights by name. Dynamic weights: written into their input surfaces (no compile).
        Baked weights: one recompile from the source graph (charges the compile budget, C05)."""
        self._check_alive()
        dynamic, baked = {}, {}
        graph_weights = self._source.weights if self._source is not None else {}
        for name, arr in arrays.items():
            if name in self._io.dynamic:
                dynamic[name] = self._check_weight(name, arr, self._io.dynamic[name].user_shape)
            elif name in graph_weights:
                shape = graph_weights[name].node.attrs.get("user_shape", graph_weights[name].shape)
                baked[name] = self._check_weight(name, arr, shape)
            elif self._source is None:
                raise WeightUpdateError(f"{name!r} is not a dynamic weight of this program and it has no source graph "
                                        f"(loaded from disk) to recompile baked weights from; dynamic weights: "
                                        f"{sorted(self._io.dynamic)}")
            else:
                known = sorted(set(self._io.dynamic) | set(graph_weights))
                raise InputError(f"unknown weight {name!r}; this program's weights: {known}")
        if dynamic:
            self._stage(dynamic)
        if baked:
            self._recompile(baked)

    def get_weight(self, name: str) -> np.ndarray:
        """Current value of a dynamic weight (user shape)."""
        if not self._keep_dynamic:
            raise ProgramStateError(f"cannot read weight {name!r}: this program's host copies of its weights were "
                                    f"dropped (drop_host_weights); its surfaces hold them in the program's layout")
        if name not in self._dynamic:
            raise InputError(f"{name!r} is not a dynamic weight of this program ({sorted(self._dynamic)})")
        return self._dynamic[name].copy()

    def _recompile(self, baked: dict[str, np.ndarray]) -> None:
        if self._source is None or self._compile_fn is None:
            raise WeightUpdateError(f"weights {sorted(baked)} are baked into this program and it has no source graph "
                                    f"(loaded from disk): compile the graph again, or make them dynamic")
        g = self._source.clone()
        for name, arr in baked.items():
            node = g.weights[name].node
            node.attrs["value"] = np.asarray(arr).reshape(g.weights[name].shape)
        args = dict(self._recompile_args)
        new = self._compile_fn(g, **args)
        old = self._prog
        self._prog, new._prog = new._prog, None
        self.mil, self._weight_files, self._io = new.mil, new._weight_files if self._keep_files else None, new._io
        self._activations = new._activations
        if self._dynamic:
            self._stage(dict(self._dynamic))
        self._source = g
        old.release()

    # -- lifecycle --------------------------------------------------------------------------------
    def release(self) -> None:
        if self._prog is not None:
            self._prog.release()
            self._prog = None

    def __enter__(self) -> "CompiledProgram":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # -- persistence ------------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> None:
        """Write model.mil, the weight files, the I/O plan and current dynamic weights to ``directory``
        atomically (a complete new folder replaces the old one in one rename)."""
        self._files("save the program")
        if not self._keep_dynamic and self._io.dynamic:
            raise ProgramStateError("cannot save the program: its host copies of the dynamic weights were dropped "
                                    "(drop_host_weights); compile the graph again to save it")
        with atomic_folder(directory) as tmp:
            with open(os.path.join(tmp, "model.mil"), "w", encoding="utf-8") as f:
                f.write(self.mil)
            files = {}
            for path, data in self._files("save the program").items():
                rel = path.replace("@model_path/", "", 1)
                if rel.startswith("/") or ".." in rel.split("/"):
                    raise InputError(f"weight path {path!r} escapes the program directory")
                full = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f:
                    f.write(data)
                files[path] = rel
            meta = {"format": FORMAT_VERSION, "target": self.target, "non_finite": self._non_finite,
                    "weight_files": files, "io": _plan_to_json(self._io)}
            with open(os.path.join(tmp, "program.json"), "w", encoding="utf-8") as f:
                json.dump(meta, f, indent=1, sort_keys=True)
            if self._dynamic:
                np.savez(os.path.join(tmp, "dynamic_weights.npz"), **self._dynamic)


def _plan_to_json(plan: IOPlan) -> dict:
    def enc(obj):
        d = dataclasses.asdict(obj)
        d.pop("initial", None)
        return d
    return {"inputs": [enc(b) for b in plan.inputs.values()],
            "outputs": [enc(b) for b in plan.outputs.values()],
            "dynamic": [enc(b) for b in plan.dynamic.values()]}


def _tup(x):
    return tuple(_tup(e) for e in x) if isinstance(x, list) else x


def _plan_from_json(d: dict) -> IOPlan:
    plan = IOPlan()
    for b in d["inputs"]:
        plan.inputs[b["name"]] = InputBinding(**{k: _tup(v) for k, v in b.items()})
    for b in d["outputs"]:
        parts = [OutputPart(**{k: _tup(v) for k, v in p.items()}) for p in b.pop("parts")]
        plan.outputs[b["name"]] = OutputBinding(parts=parts, **{k: _tup(v) for k, v in b.items()})
    for b in d["dynamic"]:
        plan.dynamic[b["name"]] = DynamicWeight(**{k: _tup(v) for k, v in b.items()})
    return plan


def load(directory: str | os.PathLike, device: str = "auto", *, profile=None) -> CompiledProgram:
    """Load a program written by :meth:`CompiledProgram.save` (compiles the saved MIL + weights)."""
    directory = os.fspath(directory)
    try:
        meta = read_json(os.path.join(directory, "program.json"), InputError,
                         missing="no such file: not a saved orion program", max_bytes=16 << 20)
        with open(os.path.join(directory, "model.mil"), encoding="utf-8") as f:
            mil = f.read()
        weights = {}
        for path, rel in meta["weight_files"].items():
            if rel.startswith("/") or ".." in rel.split("/"):
                raise InputError(f"{directory}: weight path {rel!r} escapes the program directory")
            with open(os.path.join(directory, rel), "rb") as f:
                weights[path] = f.read()
        plan = _plan_from_json(meta["io"])
    except FileNotFoundError as e:
        raise InputError(f"{directory}: not a saved orion program ({e.strerror}: {e.filename})") from None
    except InputError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise InputError(f"{directory}/program.json is malformed ({e})") from None
    if meta.get("format") != FORMAT_VERSION:
        raise InputError(f"{directory}: unsupported program format {meta.get('format')!r}")
    dyn_path = os.path.join(directory, "dynamic_weights.npz")
    if os.path.exists(dyn_path):
        with np.load(dyn_path) as z:
            for name in z.files:
                if name in plan.dynamic:
                    plan.dynamic[name].initial = z[name]
    opts = CompileOptions(target=meta["target"], non_finite=meta.get("non_finite", "error"))
    lowered = Lowered(mil, weights, plan, opts, graph=None)
    prog = compile_mil(mil, weights, device=device, profile=profile)
    return CompiledProgram(prog, lowered)
