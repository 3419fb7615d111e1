"""Programs: compiled MIL + weights on a backend, called with numpy arrays by MIL name.

``compile_mil(text, weights)`` is the low-level entry (researchers write MIL by hand); the graph
compiler (``orion.compile``) builds on it. Names, not slots: the runtime binds inputs and outputs in the
hardware's alphabetical slot order (C03/C13) so callers never see it.
"""

from __future__ import annotations

import atexit
import ctypes
import json
import logging
import warnings
from dataclasses import dataclass
from typing import Mapping, NamedTuple

import numpy as np

from .. import _html, _native
from ..errors import AneSimWarning, InputError, OrionError, ProgramStateError
from .sim import Profile, get_profile

log = logging.getLogger("orion")

_NP_DTYPES = {"fp16": np.float16, "fp32": np.float32, "int32": np.int32, "int8": np.int8, "uint8": np.uint8,
              "int16": np.int16, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_}


@dataclass(frozen=True)
class WeightUpdate:
    """What one weight update did on the device.

    budget_used: compiles charged to this process's compile budget (C05): explicit ones, compiles a
        load did inside the device (``hidden_compiles``, observed or, on the simulator, as the evidence
        says), and loads where a compile could not be observed (``unverified_loads``).
    """

    strategy: str
    budget_used: int = 0
    compiles: int = 0
    hidden_compiles: int = 0
    unverified_loads: int = 0
    loads: int = 0
    unloads: int = 0
    weight_writes: int = 0

    @property
    def budget_free(self) -> bool:
        return self.budget_used == 0 and self.unverified_loads == 0

    @classmethod
    def from_native(cls, strategy: str, report: dict) -> "WeightUpdate":
        for _, msg in report["warnings"]:  # the simulator says what it reproduced (C07)
            warnings.warn(msg, AneSimWarning, stacklevel=4)
        return cls(strategy, **{k: int(report[k]) for k in ("budget_used", "compiles", "hidden_compiles",
                                                            "unverified_loads", "loads", "unloads")})


class IOSpec(NamedTuple):
    """One program input or output: MIL name, numpy dtype, shape."""

    name: str
    dtype: np.dtype
    shape: tuple

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize


def _specs(raw) -> list[IOSpec]:
    return [IOSpec(n, np.dtype(_NP_DTYPES[d]), tuple(s)) for n, d, s in raw]


def _warn(ws) -> None:
    for cid, msg in ws:
        warnings.warn(msg, AneSimWarning, stacklevel=3)


_announced_fallback = False

# Where programs run: every --device flag offers these and resolve_device accepts them ("auto": the ANE when
# present, else the simulator).
DEVICES = ("auto", "sim", "ane")


def ane_control(command: str) -> dict | None:
    """Sends ``command`` to the ANE backend's hook (src/orion_native/ane/ane_api.h, a C function of the
    extension, called through ctypes); None when this orion was built without the ANE backend. Commands:
    info, route=inmemory|client, entry=two|one, shutdown."""
    try:
        fn = ctypes.CDLL(_native.__file__).orion_ane_control
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_char_p
    fn.argtypes = [ctypes.c_char_p]
    return json.loads(fn(command.encode()).decode())


def devices() -> list[dict]:
    """Every backend built into this orion: name, availability and, when unavailable, the reason; for
    the ANE also each route's status (the direct _ANEClient route is "unverified (known to fail on M4
    Max)" even where its selectors exist)."""
    out = [dict(d) for d in _native.backends()]
    for d in out:
        if d["name"] == "ane":
            routes = (ane_control("info") or {}).get("routes") or {}
            d["routes"] = {k: routes[k] for k in ("inmemory", "client") if k in routes}
    return out


def resolve_device(device: str) -> str:
    """"auto" -> the ANE when this build and machine have one, else the simulator (announced once)."""
    global _announced_fallback
    if device not in DEVICES:
        names = ", ".join(repr(d) for d in DEVICES[:-1])
        raise OrionError(f"unknown device {device!r}: use {names} or {DEVICES[-1]!r}")
    if device != "auto":
        return device  # the native layer explains an unavailable backend
    ane = next((d for d in devices() if d["name"] == "ane"), None)
    if ane and ane["available"]:
        return "ane"
    if not _announced_fallback:
        why = ane["reason"] if ane else "this build has no ANE backend (it is built on macOS arm64)"
        log.info("orion: using the ANE simulator (%s)", why)
        _announced_fallback = True
    return "sim"


class Program:
    """A compiled, loaded program. ``prog(x=a, y=b)`` returns ``{output name: array}``.

    Lifecycle: compiled -> loaded -> (unloaded -> loaded)* -> released; also a context manager.
    Zero-copy use: ``input_surface(name).view(...)`` / ``output_surface(name)``, ``bind_input``, ``eval()``.
    """

    def __init__(self, native, device: str, profile: Profile):
        self._p = native
        self.device = device
        self.sim_profile = profile             # the chip profile it was compiled under (profile() is the cost table)
        self.inputs = _specs(native.inputs)    # slot order (alphabetical by MIL name)
        self.outputs = _specs(native.outputs)
        self._in = {s.name: s for s in self.inputs}
        self._out = {s.name: s for s in self.outputs}
        _warn(native.compile_warnings)

    # -- identity ------------------------------------------------------------------------------
    identifier = property(lambda self: self._p.identifier, doc="content hash of MIL text, weights, options")
    mil = property(lambda self: self._p.mil, doc="the MIL text as compiled")
    folder = property(lambda self: self._p.folder, doc="the program's temp folder (model.mil + weight files)")
    state = property(lambda self: self._p.state)
    weight_keys = property(lambda self: list(self._p.weight_keys))
    cost = property(lambda self: dict(self._p.cost), doc="modelled ANE cost per eval (simulator)")

    def __repr__(self) -> str:
        def fmt(specs):
            return ", ".join(f"{s.name}: {s.dtype.name}{list(s.shape)}" for s in specs)
        return (f"<orion.Program {self.identifier[:12]}… on {self.device} ({self.state}) "
                f"inputs=({fmt(self.inputs)}) outputs=({fmt(self.outputs)})>")

    def _repr_html_(self) -> str:  # notebooks (never raises: a released program still describes itself)
        try:
            ident, state = self.identifier, self.state
        except Exception:  # noqa: BLE001
            ident, state = "?", "released"
        io = [(i, d, s.name, s.dtype.name, list(s.shape), f"{s.nbytes:,}")
              for d, specs in (("in", self.inputs), ("out", self.outputs)) for i, s in enumerate(specs)]
        info = [("identifier", ident), ("device", f"{self.device} ({getattr(self.sim_profile, 'chip', '?')} profile)"),
                ("state", state)]
        try:
            c = self.cost
            info += [("modelled cost", f"{c['est_ms']:.4f} ms per eval, {c['flops']:,.0f} flops, "
                                       f"{c['weight_bytes']:,} weight bytes (profile() for the per-op table)")]
        except Exception:  # noqa: BLE001
            pass
        info += [("process counters", ", ".join(f"{k} {v}" for k, v in counters().items()))]
        return (_html.title("orion.Program", ident[:16], f"on {self.device}")
                + _html.items(info)
                + _html.table(("slot", "", "MIL name", "dtype", "shape", "bytes"), io, code_cols=(2,))
                + "<div>slots: the hardware binds inputs and outputs in alphabetical order of their MIL names "
                  "(C03/C13); calls by name are mapped by the runtime.</div>")

    def profile(self):
        """The cost model per op (:class:`orion.native.cost_table.CostTable`: a list of dicts with a text and an HTML
        table): the executed ops in program order with their flops, bytes and modelled time on the chip
        profile, plus the per-eval dispatch; ``sum(est_ms)`` equals ``cost["est_ms"]``."""
        from .cost_table import CostTable  # start-up: orion.native.cost_table loads only for a cost table
        if self.state == "released":
            raise ProgramStateError("this Program was released: its cost model went with it; profile() before "
                                    "release()")
        return CostTable.from_cost(self._p.cost, chip=getattr(self.sim_profile, "chip", None))

    # -- calling ----------------------------------------------------------------------------------
    def __call__(self, **arrays) -> dict[str, np.ndarray]:
        out, ws = self._p.call(arrays)
        if ws:
            _warn(ws)
        return out

    def run(self, inputs: Mapping[str, np.ndarray], live_columns=None) -> dict[str, np.ndarray]:
        """``live_columns``: see :meth:`eval`."""
        self._note_live(live_columns)
        out, ws = self._p.call(dict(inputs), live=live_columns)
        if ws:
            _warn(ws)
        return out

    def stage(self, name: str, array: np.ndarray) -> None:
        """Writes ``array`` into input ``name``'s surface once: later calls may omit it (dynamic weights)."""
        self._p.stage(name, array)

    # -- surfaces ---------------------------------------------------------------------------------
    def input_surface(self, name: str):
        return self._p.input_surface(self._slot(self._p.input_slot, name, "input"))

    def output_surface(self, name: str):
        return self._p.output_surface(self._slot(self._p.output_slot, name, "output"))

    def new_surface(self, nbytes: int):
        """A zero-filled surface of ``nbytes`` that this program's backend can bind (an IOSurface on the ANE;
        ``_native.Surface`` is heap memory, which only the simulator reads)."""
        if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
            raise InputError(f"new_surface: nbytes must be a positive int, got {nbytes!r}")
        return self._p.new_surface(int(nbytes))

    def bind_input(self, name: str, surface) -> None:
        self._p.bind_input(self._slot(self._p.input_slot, name, "input"), surface)

    def bind_output(self, name: str, surface) -> None:
        self._p.bind_output(self._slot(self._p.output_slot, name, "output"), surface)

    def eval(self, live_columns=None) -> None:
        """Evaluates with the surfaces currently bound (read results from the output surfaces).

        ``live_columns`` (a hint): ``n`` - the caller reads only the first ``n`` entries of the last axis
        (the columns) of every output, or ``{output name: n}`` per output (others whole); the rest of
        those outputs is then unspecified. The simulator computes only what those entries read where it
        can prove that the live columns never read dead ones, op by op (the reasons it computes some
        ops whole are logged at debug level, once per hint); live entries are bit-identical to a full
        evaluation. The ANE ignores the hint (an eval costs the same for 1 or 16 columns there)."""
        self._note_live(live_columns)
        _warn(self._p.eval(live=live_columns))

    def live_notes(self, live_columns) -> list[str]:
        """Why parts of this program still compute every column under ``live_columns``."""
        return list(self._p.live_notes(live_columns))

    def _note_live(self, live_columns) -> None:
        if live_columns is None or not log.isEnabledFor(logging.DEBUG):
            return
        key = tuple(sorted(live_columns.items())) if isinstance(live_columns, Mapping) else live_columns
        seen = self.__dict__.setdefault("_live_seen", set())
        if key in seen:
            return
        seen.add(key)
        for note in self.live_notes(live_columns):
            log.debug("orion: live_columns=%s: %s", live_columns, note)

    def eval_slots(self, inputs, outputs) -> None:
        """Raw hardware request: surfaces bound to slots in the order given (no name mapping)."""
        _warn(self._p.eval_slots(list(inputs), list(outputs)))

    def read_output(self, name: str) -> np.ndarray:
        return self._p.read_output(name)

    @staticmethod
    def _slot(find, name, what):
        slot = find(name)
        if slot < 0:
            raise InputError(f"unknown {what} {name!r}")
        return slot

    # -- lifecycle --------------------------------------------------------------------------------
    def load(self) -> "Program":
        self._p.load()
        return self

    def unload(self) -> None:
        self._p.unload()

    def release(self) -> None:
        """Unloads, frees surfaces and removes the temp folder (unless an identical program shares it)."""
        self._p.release()

    def __enter__(self) -> "Program":
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # -- weight updates (orion.weight_updates) -----------------------------------------------
    # Each returns a WeightUpdate: what the device did, not whether the outputs changed (that is
    # orion.weight_updates.probe's question, answered by comparing with a fresh compile).
    def recompile(self, weights: Mapping[str, bytes]) -> WeightUpdate:
        """New program from new weight bytes (same MIL); charges the compile budget."""
        return WeightUpdate.from_native("recompile", self._p.recompile(dict(weights)))

    def delta_reload(self, weights: Mapping[str, bytes]) -> WeightUpdate:
        """EXPERIMENTAL: rewrite the weight files, unload and load the same program.

        The backend does it on the device. On hardware it was measured to have no effect (C07); the
        simulator reproduces that (with an AneSimWarning) unless its profile is "paper".
        """
        return WeightUpdate.from_native("delta_reload", self._p.delta_reload(dict(weights)))

    def delta_patch(self, weights: Mapping[str, bytes]) -> WeightUpdate:
        """EXPERIMENTAL: new descriptor with the new weights, loaded without an explicit
        compile. A compile inside the device is charged to the budget (observed on the ANE; assumed by the
        simulator's hardware profile, as the evidence suggests)."""
        return WeightUpdate.from_native("delta_patch", self._p.delta_patch(dict(weights)))


def compile_mil(mil_text: str | bytes, weights: Mapping[str, bytes] | None = None, device: str = "auto", *,
                profile: Profile | None = None) -> Program:
    """Compiles and loads hand-written MIL.

    ``weights`` maps the ``"@model_path/..."`` paths used in ``BLOBFILE(path = ...)`` to whole MILBlob
    file bytes (the private API's weight dictionary). Returns a loaded :class:`Program`.
    """
    dev = resolve_device(device)
    prof = profile or get_profile()
    native = _native.compile(mil_text, dict(weights) if weights is not None else {}, backend=dev,
                             **prof.native_args())
    prog = Program(native, dev, prof)
    prog.load()
    return prog


def counters() -> dict[str, int]:
    """Process-wide runtime counters: compiles, hidden_compiles, cache_hits, loads, unloads, evals,
    weight_writes, bytes_written, releases."""
    return dict(_native.counters())


def reset_counters() -> None:
    _native.reset_counters()


atexit.register(_native.shutdown)
