"""How the one decoder definition (:mod:`orion.models.llama`) reaches a layer's tensors inside a program.

The definition asks for a layer's per-channel vectors (``vec``: norm weights, biases) and its linears
(``linear``: ``W x (+ b)``, plus a LoRA branch) by the checkpoint key of the tensor (``wq``, ``rms_att``,
...); a view decides what that tensor is in the program:

* :class:`BakedLayer` - constants baked into a program of this layer alone (inference, few layers);
* :class:`SharedLayer` - program inputs named by the key, so one program serves every layer and each
  layer binds its own values (inference at depth, :class:`orion.models.stages.LayerStage`);
* :class:`orion.train.programs.TrainingLayer` - the training programs' weights (inputs shared by all
  layers, or baked per layer for LoRA), whose linears also run transposed in the backward programs.

Every view has ``layer`` (whose tensors) and ``canonical(key)`` (the checkpoint-wide name
``layers.{layer}.{key}``: what LoRA slots and W8A8 scales are keyed by)."""

from __future__ import annotations

import numpy as np

from ..lora import graph_linear
from ..quant import QuantizedArray

__all__ = ["BakedLayer", "SharedLayer", "layer_view", "take_stored"]


class _LayerView:
    def __init__(self, w: dict, layer: int, lora=None):
        self.w, self.layer, self.lora = w, layer, lora

    def canonical(self, key: str) -> str:
        return f"layers.{self.layer}.{key}"

    def array(self, key: str, factor: float | None = None):
        a = self.w[self.canonical(key)]
        return a if factor is None else np.asarray(a, np.float32) * np.float32(factor)

    def has(self, key: str) -> bool:
        return self.canonical(key) in self.w


class BakedLayer(_LayerView):
    """Layer ``layer``'s tensors baked into the program (weights named ``{key}_{layer}``)."""

    def vec(self, g, key: str, factor: float | None = None, axis: int = 1):
        return self.array(key, factor)

    def linear(self, g, x, key: str, bias: str | None = None):
        b = self.vec(g, bias) if bias else None
        return graph_linear(g, x, f"{key}_{self.layer}", self.w[self.canonical(key)], b, slots=self.lora,
                            canonical=self.canonical(key))


class SharedLayer(_LayerView):
    """Program inputs named by the key, initialised with layer ``layer``'s values: the graph is the same
    for every layer. A compressed weight enters decoded to fp16 (the ``constexpr_*`` ops that keep it
    compressed take constant operands only)."""

    def _input(self, g, key: str, shape=None, factor: float | None = None):
        # the values as held (a view of the weight cache's mapping; a compressed weight decoded once): a float32
        # copy of every layer's weights would double what capturing a layer reads - staging rounds to fp16 alike
        held = self.array(key, factor)
        v = g.weight(key, np.asarray(held), shape=shape, dynamic=True)
        if isinstance(held, QuantizedArray):       # the weight as stored: what a streamed layer decodes (streamed.py)
            v.node.attrs["stored"] = held
        return v

    def vec(self, g, key: str, factor: float | None = None, axis: int = 1):
        n = np.shape(self.w[self.canonical(key)])[0]
        return self._input(g, key, (1, n, 1, 1) if axis == 1 else (1, 1, n, 1), factor)

    def linear(self, g, x, key: str, bias: str | None = None):
        b = self.vec(g, bias) if bias else None
        return graph_linear(g, x, key, self._input(g, key), b, slots=self.lora, canonical=self.canonical(key))


def take_stored(g) -> dict:
    """``{weight name: QuantizedArray}``: the compressed weights of a shared graph as stored (:meth:`SharedLayer._input`
    marks them), taken out of the graph."""
    return {n: v.node.attrs.pop("stored") for n, v in g.weights.items() if "stored" in v.node.attrs}


def layer_view(w: dict, layer: int, lora=None, shared: bool = False) -> _LayerView:
    return (SharedLayer if shared else BakedLayer)(w, layer, lora)
