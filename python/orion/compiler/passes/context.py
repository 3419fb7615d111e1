"""What every pass shares: the compile options, the I/O plan (user names ↔ MIL params/results and how
to convert between them), dynamic-weight layouts, warnings and per-pass statistics."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ...errors import CompileError
from ...ir.graph import Graph, Value
from ...native.layout import transposed
from ...native.sim import catalog_limits

_LIMITS = catalog_limits()      # the simulator's numbers (defined once, in the native constraint catalog)


class CompileWarning(UserWarning):
    """The compiler changed or could not fully legalize something (constraint ID in the message)."""


def compile_error(message: str, constraint: str | None = None, statement: str | None = None) -> CompileError:
    """A CompileError carrying the constraint ID (also appended to the message) and the offending node."""
    err = CompileError(f"{message} [{constraint}]" if constraint else message)
    err.constraint = constraint
    err.statement = statement
    return err


@dataclass
class CompileOptions:
    target: str = "ios18"                 # "ios18" (M3+) or "ios16" (M1/M2, C29)
    chip: str | None = None               # m1..m5 when known (C24 width limit, C35 packing)
    weight_layout: str = "multi"          # "multi": one multi-blob file per program (C18); "per_tensor"
    count_weight_tensors: bool = True     # C18 budget counts tensors too (the simulator's strict profile)
    dynamic_weights: Any = None           # None | True (all weights) | iterable of weight names
    pack_dynamic_weights: bool = False    # several conv weights with equal in-channels in one input surface
    panel_dynamic_weights: bool = False   # conv weights as column panels [1, OC/64, IC, 64] (dynamic_weights pass)
    non_finite: str = "error"             # non-finite / out-of-fp16-range weights: "error" | "warn"
    allow_concat: bool = False            # emit the full-form concat instead of rejecting it (C01)
    softmax_pow2: bool = True             # rewrite last-axis non-power-of-two softmax explicitly (C21)
    min_surface_bytes: int = _LIMITS["min_surface_bytes"]   # C04
    min_seq: int = 16                     # C04: declared S >= 16
    max_seq_pad: int = 1024               # largest S the sequence-padding retrace may pad to
    max_axis: int = _LIMITS["max_axis"]   # C22
    conv_split_channels: int = _LIMITS["warn_input_channels"]   # C25: split contractions over more input channels
    max_weight_files: int = _LIMITS["max_weight_tensors"]   # C18
    sram_warn_bytes: int = 32 * 1024 * 1024  # C26
    fold_max_elements: int = 1 << 16      # constant folding never creates consts bigger than this

    def __post_init__(self):
        if self.target not in ("ios18", "ios16"):
            raise CompileError(f"unknown target {self.target!r}: use 'ios18' (M3 and later) or 'ios16' (M1/M2)")
        if self.weight_layout not in ("multi", "per_tensor"):
            raise CompileError(f"unknown weight_layout {self.weight_layout!r}: use 'multi' or 'per_tensor'")
        if self.non_finite not in ("error", "warn"):
            raise CompileError(f"non_finite must be 'error' or 'warn', got {self.non_finite!r}")
        for f in fields(self):       # switches: a truthy string or number must not pass for True
            if isinstance(f.default, bool) and not isinstance(getattr(self, f.name), bool):
                raise CompileError(f"compile option {f.name} must be True or False, got {getattr(self, f.name)!r}")

    @property
    def legacy(self) -> bool:
        return self.target == "ios16"


@dataclass
class InputBinding:
    """A program input: the user-facing array and the MIL parameter it is written into."""
    name: str                          # user-facing name (graph input or dynamic-weight surface)
    key: str                           # key in graph.inputs
    shape: tuple                       # user-facing shape
    dtype: str                         # user-facing dtype ("fp16"/"fp32")
    kind: str = "activation"           # "activation" | "weight" (a dynamic-weight surface, staged)
    mil_name: str = ""
    mil_shape: tuple = ()
    mil_dtype: str = ""
    pad_axis: int | None = None        # data fills [..., :shape[axis], ...] of a zero-padded surface

    def to_surface(self, arr: np.ndarray) -> np.ndarray:
        np_dt = np.float16 if self.mil_dtype == "fp16" else np.float32
        arr = np.asarray(arr)
        if tuple(self.mil_shape) == tuple(arr.shape):
            if self.mil_dtype == "fp16" and arr.dtype == np.float32:
                return np.ascontiguousarray(arr)      # the runtime converts fp32 -> fp16 natively
            return np.ascontiguousarray(arr, dtype=np_dt)
        out = np.zeros(self.mil_shape, dtype=np_dt)
        out[tuple(slice(0, d) for d in arr.shape)] = arr
        return out


@dataclass
class OutputPart:
    key: str                           # key in graph.outputs
    shape: tuple                       # logical shape of this part (before padding/widening)
    mil_name: str = ""
    mil_shape: tuple = ()
    mil_dtype: str = ""
    unpad: tuple = ()                  # steps applied in the program, in order: ("slice", axis, n) after a
    #                                    sequence-padding retrace, ("widen", k) after a broadcast widening

    def from_surface(self, arr: np.ndarray) -> np.ndarray:
        for step in reversed(self.unpad):
            if step[0] == "slice":
                arr = arr[(slice(None),) * step[1] + (slice(0, step[2]),)]
            else:                          # widened: every element repeated k times on the last axis
                k = step[1]
                arr = arr.reshape(arr.shape[:-1] + (arr.shape[-1] // k, k))[..., 0]
        return arr


@dataclass
class OutputBinding:
    name: str
    shape: tuple
    dtype: str
    parts: list[OutputPart]
    concat_axis: int | None = None     # several parts: host-side concatenation (C01 / C22 chunking)


@dataclass
class DynamicWeight:
    """A weight passed as a program input (passes/dynamic_weights.py)."""
    name: str
    user_shape: tuple                  # what set_weights accepts
    layout: str                        # "as_is" | "conv_t" ([OC, IC, 1, 1] stored as [1, IC, 1, OC]) |
                                       # "conv_p" (stored as column panels [1, OC/P, IC, P])
    input_key: str                     # graph input carrying it (shared when packed)
    surface_shape: tuple               # logical shape inside the (packed) input
    offset: int = 0                    # packed: position on the packed axis (pack_axis)
    initial: np.ndarray | None = None
    pack_axis: int = 3                 # packed: the axis the input stacks its weights on

    def to_surface(self, arr: np.ndarray) -> np.ndarray:
        arr = np.asarray(arr)
        if self.layout == "conv_t":
            oc, ic = self.surface_shape[3], self.surface_shape[1]
            return transposed(arr.reshape(oc, ic), (1, 0)).reshape(self.surface_shape)
        if self.layout == "conv_p":
            _, p, ic, width = self.surface_shape
            return transposed(arr.reshape(p, width, ic), (0, 2, 1)).reshape(self.surface_shape)
        return arr.reshape(self.surface_shape)

    def place(self, packed: np.ndarray, surf: np.ndarray) -> None:
        """Writes this weight's surface-layout values into the host copy of its packed input."""
        at = [slice(None)] * packed.ndim
        at[self.pack_axis] = slice(self.offset, self.offset + self.surface_shape[self.pack_axis])
        packed[tuple(at)] = surf


@dataclass
class IOPlan:
    inputs: dict[str, InputBinding] = field(default_factory=dict)     # by user name
    outputs: dict[str, OutputBinding] = field(default_factory=dict)   # by user name
    dynamic: dict[str, DynamicWeight] = field(default_factory=dict)   # by weight name

    @classmethod
    def from_graph(cls, graph: Graph) -> "IOPlan":
        plan = cls()
        for name, v in graph.inputs.items():
            plan.inputs[name] = InputBinding(name, name, v.shape, v.dtype)
        for name, v in graph.outputs.items():
            plan.outputs[name] = OutputBinding(name, v.shape, v.dtype, [OutputPart(name, v.shape)])
        return plan

    def binding_for_key(self, key: str) -> InputBinding | None:
        for b in self.inputs.values():
            if b.key == key:
                return b
        return None

    def part_for_key(self, key: str) -> OutputPart | None:
        for b in self.outputs.values():
            for p in b.parts:
                if p.key == key:
                    return p
        return None


class CompileContext:
    def __init__(self, graph: Graph, options: CompileOptions):
        self.options = options
        self.io = IOPlan.from_graph(graph)
        self.warnings: list[str] = []
        self.stats: dict[str, dict] = {}
        self.weight_files: int = 0

    def warn(self, message: str, constraint: str | None = None) -> None:
        text = f"{message} [{constraint}]" if constraint else message
        self.warnings.append(text)
        warnings.warn(text, CompileWarning, stacklevel=4)

    def count(self, pass_name: str, key: str, n: int = 1) -> None:
        d = self.stats.setdefault(pass_name, {})
        d[key] = d.get(key, 0) + n


def node_label(v: Value) -> str:
    n = v.node
    return f"{n.op} '{n.name or v.name or n.id}'"
