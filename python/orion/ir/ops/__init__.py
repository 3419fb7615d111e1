"""The op builders, one module per op family (as coremltools groups them), and ``schema()``.

Each op is described once, in the simulator's registry (``src/orion_native/sim/ops/registry.cpp``: MIL
parameters with types and optionality, family, output rule, ANE evidence, constraint IDs, the lowering
the compiler applies) and its shape/dtype inference (``sim/ops/*.cpp``, asked through ``_core.native_infer``).
``_core.define`` builds every IR ``OpDef`` from that row and adds what only Python knows (float64 reference,
builder defaults); the compiler's validation and legalisation lists are read from the same rows. Every
simulator op has a builder here.

Composites (linear, norms, attention, RoPE, SwiGLU, LoRA) live in ``..composites`` (built on the family
modules, not on this package) and are reachable as ``ops.<name>`` too.
"""

from __future__ import annotations

from ...native import sim
from ..graph import MAX_RANK, GraphError, Value, check_shape  # noqa: F401  (reachable as ops.<name> before the split)
from ._core import (  # noqa: F401  (the registry API the passes and codegen use)
    BAKED, BUILDERS, MAX_AXIS, OPS, REQUIRED, SCHEMA, AttrDef, OpDef, as_value, builder,
    evaluate_node, infer_types, make, native_infer, register, reinfer,
)
from .elementwise import (  # noqa: F401
    add, cast, div, exp, log, maximum, minimum, mul, pow, real_div, rsqrt, select, sqrt, sub, tanh,  # noqa: A004
)
from .activation import clip, gelu, relu, sigmoid, silu, softmax  # noqa: F401
from .contraction import conv, matmul, scaled_dot_product_attention  # noqa: F401
from .reduction import reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_sum  # noqa: F401
from .tensor_transformation import (  # noqa: F401
    band_part, concat, gather, getitem, identity, reshape, slice_by_index, slice_by_size, split, transpose,
)
from .quantization import (  # noqa: F401
    constexpr_affine_dequantize, constexpr_blockwise_shift_scale, constexpr_lut_to_dense, dequantize, quantize,
)
from . import normalization  # noqa: F401  (normalization.layer_norm: the MIL op; ops.layer_norm: the composite)
from ..composites import (
    causal_attention, causal_mask, inv_rms, layer_norm, linear, lora_branch, lora_linear, matmul_linear,
    region_attention, rms_norm, rope, rope_tables, swiglu_ffn,
)

# the composites are builders too (g.linear(...)); layer_norm: the composite, not the MIL op of that name
BUILDERS.update(causal_attention=causal_attention, causal_mask=causal_mask, inv_rms=inv_rms, layer_norm=layer_norm,
                linear=linear, lora_branch=lora_branch, lora_linear=lora_linear, matmul_linear=matmul_linear,
                region_attention=region_attention, rms_norm=rms_norm, rope=rope, rope_tables=rope_tables,
                swiglu_ffn=swiglu_ffn)

# schema op -> the builder that emits it ("Graph.const" for const: consts and weights are graph methods)
_BUILDER_OF = {"const": "Graph.const", "layer_norm": "normalization.layer_norm"}


def schema(profile=None) -> list[dict]:
    """The op schema: one dict per op the simulator knows — ``name``, ``family``, ``params`` (MIL spelling,
    required first, "?" = optional), ``types`` (param -> type), ``output`` (rule), ``evidence``,
    ``constraints``, ``lowering`` and ``status`` (under ``profile``, default: orion.sim's) — plus the IR
    view: ``builder`` (the function that emits it) and ``ir_params`` (the parameters the IR carries)."""
    out = []
    for row in sim.ops(profile):
        d = dict(row)
        op = OPS.get(row["name"])
        d["builder"] = _BUILDER_OF.get(row["name"], row["name"] if row["name"] in BUILDERS else None)
        d["ir_params"] = [] if op is None else \
            [p.lstrip("*").rstrip("?") for p in op.inputs] + [a.name for a in op.attrs]
        out.append(d)
    return out
