"""Budget checks: weight files / tensors per program (C18/C19) and the SRAM working set (C26).

C18: at most 16 BLOBFILE weights per program, 15 when it contains ``pow`` or an ``add`` with a scalar
const (C19). The default layout puts every weight of a program into ONE multi-blob file, which is what
the evidence says the limit counts; ``count_weight_tensors`` (default True, as the simulator's strict
profile) also counts tensors. ``weight_layout="per_tensor"`` (one file per tensor, the portable M1
choice, C32) is always counted per file.
C26: weights + the largest op's operands above ~32 MB falls off the SRAM cliff: warning only.
"""

from __future__ import annotations

import numpy as np

from ...ir.graph import Graph
from ...ir.ops import BAKED
from .context import CompileContext, compile_error


def is_blob_const(v) -> bool:
    """Float tensors (rank >= 1) are BLOBFILE weights; scalars and int vectors are inline literals."""
    return v.op == "const" and v.dtype in ("fp16", "fp32") and v.rank >= 1


def blob_operand_params(v) -> list[str]:
    """The parameters, sorted, of a value the codegen writes as a constexpr op with BLOBFILE operands: a
    compressed weight (``Graph.weight(..., quant=...)``: a const carrying its QuantizedTensor) or a constexpr
    node (tensor attributes; scalars such as ``axis`` stay inline). Empty for anything else."""
    q = v.node.attrs.get("quant") if v.op == "const" else None
    if q is not None:
        return sorted(q.operands())
    if v.op == "const" or v.op not in BAKED:
        return []
    return [k for k, a in sorted(v.node.attrs.items())
            if a is not None and (hasattr(a, "blob_dtype_code") or np.ndim(a) >= 1)]


def blob_tensors(v) -> int:
    """BLOBFILE tensors ``v`` takes: 1 for a float weight, one per operand of a compressed weight or a
    constexpr op (C18 counts each; C47: how the ANE counts them is unknown)."""
    n = len(blob_operand_params(v))
    return n if n else int(is_blob_const(v))


def blob_bytes(v) -> int:
    """Bytes ``v`` puts into the weight file (a compressed weight: its packed operands)."""
    q = v.node.attrs.get("quant") if v.op == "const" else None
    return q.nbytes if q is not None else v.nbytes


def weight_slots(graph: Graph, ctx: CompileContext) -> tuple[int, int, str]:
    blobs = [None for n in graph.nodes for _ in range(blob_tensors(n.out))]
    files = (1 if blobs else 0) if ctx.options.weight_layout == "multi" else len(blobs)
    counted = max(files, len(blobs)) if ctx.options.count_weight_tensors else files
    penalty = any(n.op == "pow" or (n.op == "add" and any(v.is_const and v.rank == 0 for v in n.input_values()))
                  for n in graph.nodes)
    limit = ctx.options.max_weight_files - (1 if penalty else 0)
    what = "weight tensors" if counted == len(blobs) and ctx.options.count_weight_tensors else "weight files"
    return counted, limit, what


def sram_estimate(graph: Graph) -> int:
    weights = sum(blob_bytes(n.out) for n in graph.nodes if blob_tensors(n.out))
    peak = 0
    for n in graph.nodes:
        if n.op in ("const", "input"):
            continue
        peak = max(peak, sum(v.nbytes for v in n.input_values() if not v.is_const) + sum(o.nbytes for o in n.outputs))
    return weights + peak


def run(graph: Graph, ctx: CompileContext) -> None:
    counted, limit, what = weight_slots(graph, ctx)
    ctx.weight_files = counted
    if counted > limit:
        cid = "C18" if counted > ctx.options.max_weight_files else "C19"
        raise compile_error(
            f"program has {counted} {what}, the ANE accepts at most {limit}"
            + (" (pow or add with a scalar const costs one slot)" if limit < ctx.options.max_weight_files else "")
            + "; split the graph into several programs, or make some weights dynamic (program inputs)"
            + (", or use weight_layout='multi'" if ctx.options.weight_layout == "per_tensor" else "")
            + (", or count_weight_tensors=False (files only, the best reading of the evidence)"
               if ctx.options.count_weight_tensors and ctx.options.weight_layout == "multi" else ""), cid)
    est = sram_estimate(graph)
    ctx.stats.setdefault("budget", {})["sram_bytes"] = est
    if est > ctx.options.sram_warn_bytes:
        ctx.warn(f"estimated working set {est / 2**20:.1f} MB exceeds ~{ctx.options.sram_warn_bytes / 2**20:.0f} MB "
                 f"of ANE SRAM: expect a large slowdown; split the program or keep big matrices on the CPU", "C26")
