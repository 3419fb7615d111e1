"""LoRA adapters as program inputs: hot swap without compiles, merge/unmerge, PEFT-compatible files.

A linear with an adapter computes ``W x + (alpha / r) · B (A x)``: W stays baked in the program (a 1x1
conv), A ``[r, in]`` and B ``[out, r]`` are program inputs (:func:`orion.ops.lora_linear`; the compiler's
dynamic-weights pass makes them inputs, io_legalize pads them to the minimum surface size and the
runtime binds every input by name, so the alphabetical slot order of C13 and the uniform allocation
of C12 never reach this code). The scale ``alpha / r`` is folded into the staged B, so adapters with
any alpha and any rank up to the programs' slot rank (zero-padded; exact) swap by writing surfaces:
zero compiles, zero loads.

Names. An :class:`Adapter` is bound to one model configuration and holds its tensors by the canonical
weight name of the linear it adapts (``layers.3.wq``, ``h.0.wqkv``: :mod:`orion.models.loaders`), in
orion's layouts (Llama q/k rows in llama2.c's adjacent-pair order). Files are PEFT's: a folder with
``adapter_model.safetensors`` (``base_model.model.<module path>.lora_A.weight`` ``[r, in]`` and
``.lora_B.weight`` ``[out, r]``, Hugging Face module paths and row orders) and ``adapter_config.json``
(``r``, ``lora_alpha``, ``target_modules``, ...).

Target modules (``targets``), per family — short names, the Hugging Face module names, PEFT's suffix
rule (``"c_proj"`` matches both GPT-2 ``attn.c_proj`` and ``mlp.c_proj``), ``"all-linear"``, or a regex
string matched against the full module path as PEFT does:

=========  =============================================================================
Llama      q/q_proj, k/k_proj, v/v_proj, o/o_proj, w1/gate/gate_proj, w3/up/up_proj, w2/down/down_proj
GPT-2      c_attn (qkv), attn.c_proj (o), c_fc (fc), mlp.c_proj (proj), c_proj (both projections)
=========  =============================================================================

>>> m = orion.models.load("stories15M.bin")
>>> a = orion.lora.load("adapters/tiny-shakespeare", m)       # PEFT folder
>>> m.set_adapter(a); m.generate("Once upon a time")           # 0 compiles after the first use
>>> m.set_adapter(None)                                        # the base model again (exactly)
"""

from .adapter import Adapter, base_fingerprint, init_adapter
from .config import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraConfig
from .errors import AdapterConfigError, AdapterFormatError, AdapterMismatch, AdapterShapeError, LoraError
from .files import PEFT_PREFIX, load, save
from .merge import merge, unmerge
from .slots import AdapterSlots, get_adapter, graph_linear, set_adapter, slot_names
from .targets import canonical_name, linear_shapes, model_config, module_path, resolve_targets

__all__ = ["LoraError", "AdapterConfigError", "AdapterMismatch", "AdapterShapeError", "AdapterFormatError",
           "LoraConfig", "Adapter", "init_adapter", "load", "save", "merge", "unmerge", "set_adapter",
           "resolve_targets", "module_path", "AdapterSlots", "graph_linear", "slot_names", "base_fingerprint",
           "ADAPTER_CONFIG", "ADAPTER_WEIGHTS"]
