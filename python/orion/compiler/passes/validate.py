"""Validation, last before codegen: every ANE constraint (``orion.sim.constraints()``) that applies to MIL text is
checked, and a violation raises CompileError with the constraint ID and the offending node.

(Constraints fixed by earlier passes are re-checked here, so a custom pipeline that drops a pass gets a
precise error instead of a program the ANE rejects.) Nothing here is a table of its own: which ops must
not reach the ANE (the schema's ``lowering``) and the numeric limits (the constraint catalog's
``limits``) come from the simulator, so both sides apply the same facts.
"""

from __future__ import annotations


import numpy as np

from ...ir.ops import BAKED, OPS, SCHEMA
from ...ir.graph import Graph
from ...native.sim import catalog_limits
from .context import CompileContext, compile_error
from .names import collation_consistent

# families whose ops move or reinterpret data rather than compute in fp16 (C37 does not apply)
_DTYPE_FREE = ("source", "tensor_transformation", "quantization")


def limits(chip: str | None) -> dict[str, int]:
    """The numbers the simulator's constraint checks use for ``chip`` (default m4), by name."""
    return catalog_limits(chip)


def _not_emitted(op: str) -> tuple[str | None, str] | None:
    """(constraint, why) when the schema says the compiler lowers ``op`` instead of emitting it."""
    row = SCHEMA.get(op)
    if row is None or not row["lowering"]:
        return None
    cid = row["constraints"][0] if row["constraints"] else None
    return cid, f"{op} is not emitted for the ANE (evidence {row['evidence']}); run decompose ({row['lowering']})"


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def run(graph: Graph, ctx: CompileContext) -> None:
    opts = ctx.options
    lim = limits(opts.chip)
    max_axis = min(opts.max_axis, lim["max_axis"])
    graph.topo_check()
    names: set[str] = set()
    for node in graph.nodes:
        where = node.out.mil_name or node.name
        d = OPS.get(node.op)
        if d is None or (d.mil is None and node.op != "input"):
            raise compile_error(f"{node.describe()}: op has no MIL form", None, where)
        rejected = _not_emitted(node.op)
        if rejected:
            raise compile_error(f"{node.describe()}: {rejected[1]}", rejected[0], where)
        for v in node.outputs:
            if v.rank > lim["max_rank"]:
                raise compile_error(f"{node.describe()}: rank {v.rank} exceeds {lim['max_rank']}", "C23", where)
            if any(dim > max_axis or dim < 1 for dim in v.shape):
                raise compile_error(f"{node.describe()}: axis length outside 1..{max_axis}; chunk the tensor "
                                    f"(a returned conv is chunked automatically)", "C22", where)
            if v.mil_name is not None:
                if v.mil_name in names:
                    raise compile_error(f"duplicate SSA name {v.mil_name!r}", "C40", v.mil_name)
                names.add(v.mil_name)
            if d.category not in _DTYPE_FREE and node.op != "cast" and v.dtype != "fp16":
                raise compile_error(f"{node.describe()}: the ANE computes in fp16; cast only at program I/O", "C37",
                                    where)
        if node.op == "concat" and not opts.allow_concat:
            raise compile_error(f"{node.describe()}: concat; return the pieces as separate outputs", "C01", where)
        if node.op == "conv":
            if "bias" in node.inputs:
                raise compile_error(f"{node.describe()}: conv takes no bias=; run decompose (separate add)", "C16",
                                    where)
            w = node.inputs["weight"]
            if w.op not in BAKED:
                raise compile_error(f"{node.describe()}: conv weight must be a constant (dynamic weights lower to "
                                    f"matmul in the dynamic_weights pass)", None, where)
            if w.shape[3] > lim["max_kernel_width"]:
                raise compile_error(f"{node.describe()}: kernel width {w.shape[3]} exceeds {lim['max_kernel_width']}",
                                    "C24", where)
            if node.inputs["x"].shape[1] >= lim["reject_input_channels"]:
                raise compile_error(f"{node.describe()}: {node.inputs['x'].shape[1]} input channels are rejected; "
                                    f"the limits pass splits contractions above {opts.conv_split_channels}", "C25",
                                    where)
        if node.op == "softmax" and opts.softmax_pow2:
            x = node.inputs["x"]
            if node.attrs["axis"] == x.rank - 1 and not _is_pow2(x.shape[-1]):
                raise compile_error(f"{node.describe()}: softmax over a non-power-of-two last axis", "C21", where)
        if node.op == "mul":
            for a, b in ((node.inputs["x"], node.inputs["y"]), (node.inputs["y"], node.inputs["x"])):
                if a.op.startswith("reduce_") and b.is_const and not np.any(np.asarray(b.data, np.float16)):
                    raise compile_error(f"{node.describe()}: multiplying a reduction by zero fails to compile; run "
                                        f"constant_fold", "C33", where)
        if node.op == "cast" and opts.legacy:
            raise compile_error(f"{node.describe()}: M1/M2 reject casts; fp32 I/O is converted on the host", "C28",
                                where)
        if opts.legacy and node.op == "input" and node.out.dtype == "fp32":
            raise compile_error(f"input {node.attrs['io_name']!r}: fp32 program I/O is rejected on M1/M2", "C28", where)
    for key, v in graph.outputs.items():
        if v.op in ("input", "const"):
            raise compile_error(f"output {key!r} is not an op result", "C17", key)
        if v.dtype not in ("fp16", "fp32"):
            raise compile_error(f"output {key!r} is {v.dtype}", "C39", key)
        if opts.legacy and v.dtype == "fp32":
            raise compile_error(f"output {key!r}: fp32 program I/O is rejected on M1/M2", "C28", key)
    if len({id(v) for v in graph.outputs.values()}) != len(graph.outputs):
        raise compile_error("two outputs return the same value (the return tuple must name distinct values)", "C17")
    for label, vals in (("input", graph.inputs.values()), ("output", graph.outputs.values())):
        mil = [v.mil_name for v in vals]
        if None not in mil and not collation_consistent(mil):
            raise compile_error(f"{label} names {mil} sort differently byte-wise and case-insensitively; slot order "
                                f"would be ambiguous", "C03" if label == "output" else "C13")
    if opts.legacy and any(n.op == "matmul" for n in graph.nodes):
        ctx.warn("matmul is disputed on M1/M2 (PR #6 reports failures, M1 training runs use it)", "C30")
