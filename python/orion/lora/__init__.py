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
orion's layouts (Llama-style q/k rows in llama2.c's adjacent-pair order; q is ``n_heads * head_dim``
rows). Files are PEFT's: a folder with ``adapter_model.safetensors``
(``base_model.model.<module path>.lora_A.weight`` ``[r, in]`` and ``.lora_B.weight`` ``[out, r]``,
Hugging Face module paths and row orders) and ``adapter_config.json`` (``r``, ``lora_alpha``,
``target_modules``, ``rank_pattern``, ``alpha_pattern``, ...). The module paths come from the family
modules (:mod:`orion.models.families`, every ``model_type`` orion loads); a fused module (Phi-3's
``qkv_proj`` and ``gate_up_proj``) is one PEFT adapter — one lora_A, lora_B stacked by rows — which is
exactly the adapters of its parts with a shared A (:attr:`Adapter.tied`).

Target modules (``targets``) — orion's short names, the Hugging Face module names, PEFT's suffix rule
(``"c_proj"`` matches both GPT-2 ``attn.c_proj`` and ``mlp.c_proj``; a full module path matches one
layer), ``"all-linear"``, or a regex string matched against the full module path as PEFT does:

=========  =============================================================================
Llama      q/q_proj, k/k_proj, v/v_proj, o/o_proj, w1/gate/gate_proj, w3/up/up_proj, w2/down/down_proj,
           qkv (q,k,v), gate_up (gate,up), attn, mlp/ffn — also Qwen 2/3, Mistral, Gemma 3
Phi-3      qkv/qkv_proj (or q,k,v together), o/o_proj, gate_up/gate_up_proj (or gate,up), down/down_proj;
           part of a fused module raises :class:`AdapterConfigError` (no exact PEFT form)
GPT-2      c_attn (qkv), attn.c_proj (o), c_fc (fc), mlp.c_proj (proj), c_proj (both projections)
=========  =============================================================================

Norms (Qwen 3 / Gemma 3 q/k norms, Gemma's sandwich norms) and biases are not targets.

Modules: :mod:`.targets` (module paths, shapes, target rule), :mod:`.config` (:class:`LoraConfig`),
:mod:`.adapter` (:class:`Adapter`, :func:`init_adapter`), :mod:`.files` (PEFT folders), :mod:`.merge`,
:mod:`.slots` (adapters as program inputs, :func:`set_adapter`), :mod:`.errors`.

>>> m = orion.models.load("stories15M.bin")
>>> a = orion.lora.load("adapters/tiny-shakespeare", m)       # PEFT folder
>>> m.set_adapter(a); m.generate("Once upon a time")           # 0 compiles after the first use
>>> m.set_adapter(None)                                        # the base model again (exactly)
"""

from .adapter import Adapter, base_fingerprint, init_adapter, load, save
from .config import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraConfig
from .errors import AdapterConfigError, AdapterFormatError, AdapterMismatch, AdapterShapeError, LoraError
from .files import PEFT_PREFIX
from .merge import merge, unmerge
from .slots import AdapterSlots, get_adapter, graph_linear, set_adapter, slot_names
from .targets import canonical_name, linear_shapes, model_config, module_path, resolve_targets

__all__ = ["LoraError", "AdapterConfigError", "AdapterMismatch", "AdapterShapeError", "AdapterFormatError",
           "LoraConfig", "Adapter", "init_adapter", "load", "save", "merge", "unmerge", "set_adapter",
           "resolve_targets", "module_path", "AdapterSlots", "graph_linear", "slot_names", "base_fingerprint",
           "ADAPTER_CONFIG", "ADAPTER_WEIGHTS"]
