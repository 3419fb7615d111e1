"""Compressed weights for a loaded model (``orion.models.load(path, quantize=...)``): every linear weight of
the layers (``layers.N.wq ... w3`` of the Llama-style families; GPT-2 is refused: its stages cannot be split
into the parts the extra constexpr operands need under C18) becomes an
:class:`orion.quant.QuantizedArray`, which the stage graphs bake as a constexpr op (the programs hold
the compressed bytes) and every numpy consumer reads as the exact fp16 values the op produces.

Kept fp16: embeddings, norms, biases and the device classifier (sliced into row chunks, which a compressed weight
does not survive). The CPU classifier (the default) is int8 in a quantized model unless ``classifier_weights="fp16"``
(:mod:`orion.models.classifier`: built from the fp16 weight at load, not stored). Group / block sizes
that do not divide a tensor (stories260K's d_ff = 172 with LUT groups of 16, int4 blocks of 32) are
replaced per tensor by the smallest divisor above them (:func:`orion.quant.fitting_divisor`; 172 -> 43).

W8A8 (experimental; ``load(path, quantize="int8", activations="int8", calibration=text | ids)``): the int8
linears also take int8 inputs, ``quantize`` -> ``dequantize`` with one static scale per linear input,
calibrated on the fp16 model (:mod:`orion.quant.activations`); ``Model.activation_scales`` holds them,
``.save(path)`` writes them next to the model and ``load`` reads them back when calibration is omitted.
"""

from __future__ import annotations

import hashlib
import logging
import os

import numpy as np

from .._version import __version__
from ..errors import InputError, ModelFormatError
from ..quant import SCHEMES, QuantizedArray, quantize_weights
from ..quant.activations import ACTIVATION_DTYPES, ActivationScales
from ..quant.store import STORE_FORMAT, read_quantized, write_quantized
from . import host_pages
from .calibration import calibrate
from .loaders import mark_used, prune_cache

log = logging.getLogger("orion")

__all__ = ["MODEL_SCHEMES", "ACTIVATION_SCHEMES", "quantize_model", "quantized_cache_entry", "check_w8a8", "activation_scales",
           "ExperimentalWarning"]

#: the schemes ``load(quantize=...)`` and every ``--quantize`` flag take: each weight scheme of orion.quant
MODEL_SCHEMES = tuple(SCHEMES)


def quantized_cache_entry(weights_entry: str, scheme: str, seed: int = 0) -> str:
    """Where the compressed weights of the weight cache entry ``weights_entry`` (``<key>.safetensors``) are kept:
    beside it, named by scheme, seed, store format and orion version (a new release quantizes afresh), so
    the cache's size cap and LRU pruning cover them too."""
    stem = os.path.basename(weights_entry).removesuffix(".safetensors")
    return os.path.join(os.path.dirname(weights_entry),
                        f"{stem}.{scheme}-s{seed}-q{STORE_FORMAT}-{__version__}.safetensors")


# elements of each fp16 tensor a compressed-weight cache entry is checked against: a few pages a tensor
FINGERPRINT_SAMPLES = 8


def fingerprint(weights: dict, names) -> str:
    """A hash of ``FINGERPRINT_SAMPLES`` evenly spaced values of each named weight (and the names and shapes):
    what ties a compressed-weight cache entry to the fp16 weights it was made from, reading a few pages of
    each instead of all of them."""
    h = hashlib.sha256()
    for n in sorted(names):
        a = np.asarray(weights[n]).reshape(-1)
        idx = np.linspace(0, a.size - 1, min(a.size, FINGERPRINT_SAMPLES)).astype(np.int64)
        h.update(f"{n}:{list(np.shape(weights[n]))}:".encode())
        h.update(np.ascontiguousarray(a[idx], dtype=np.float16).tobytes())
    return h.hexdigest()


def _read_cached(entry: str, weights: dict):
    """``(quantized, report)`` from a cache entry, or None when it is missing, unreadable or made from other
    weights (then rebuilt)."""
    if not os.path.exists(entry):
        return None
    try:
        q, report, meta = read_quantized(entry, shapes={n: tuple(np.shape(a)) for n, a in weights.items()})
        if meta.get("orion_fingerprint") != fingerprint(weights, q):
            raise ModelFormatError(f"{entry}: made from other weights than these (fingerprint differs)")
    except ModelFormatError as e:
        log.warning("orion: rebuilding corrupt compressed-weight cache entry %s (%s)", entry, e)
        return None
    mark_used(entry)
    return q, report


def quantize_model(weights: dict, scheme: str, *, seed: int = 0, cache_file: str | None = None):
    """``(weights with the layers' linears quantized, WeightReport)``; the input dict is not modified.

    ``cache_file``: the weight cache entry ``weights`` were read from (:func:`orion.models.loaders.load_weights`).
    The compressed weights are then computed once and kept beside it (:func:`quantized_cache_entry`, atomic
    writes, a corrupt entry rebuilt); the ones returned are memory-mapped views of that file, whose pages the
    engine gives back once the programs hold the weights - a compressed model holds no anonymous copy of
    them - and a later load skips the quantization (lut4 k-means: seconds per 100 MB)."""
    if scheme not in MODEL_SCHEMES:
        raise InputError(f"quantize must be one of {', '.join(MODEL_SCHEMES)} (or None for fp16), got {scheme!r}")
    entry = quantized_cache_entry(cache_file, scheme, seed) if cache_file else None
    got = _read_cached(entry, weights) if entry else None
    if got is not None:
        q, report = got
    else:
        q, report = quantize_weights(weights, scheme, fit=True, seed=seed, names=lambda n: n.startswith("layers."))
        if q and entry:
            try:
                write_quantized(entry, q, report, {"orion_source": os.path.basename(cache_file),
                                                   "orion_fingerprint": fingerprint(weights, q)})
                q, report, _ = read_quantized(entry)   # the mapped file's views: no anonymous copy kept
                prune_cache(os.path.dirname(entry), keep=entry)
            except OSError as e:
                log.warning("orion: could not write the compressed-weight cache %s (%s)", entry, e)
    # The pages the quantizer or the fingerprint read (with the kernel's fault-around, up to 64 KB a sample) go
    # back at once: the compressed weights replace the fp16 ones these linears were.
    host_pages.release([weights[n] for n in q if n in weights])
    if not q:   # GPT-2 (h.N.*): its stages cannot be split into parts, and int8 operands exceed C18
        raise InputError(f"quantize={scheme!r}: this model has no layers.N linears to compress (compressed "
                         "weights are available for the Llama-style families, not GPT-2); load it without quantize")
    # Kept fp16 tensors (embedding, norms) stay as they are - views of the weight cache's mapped file where
    # they come from it: the engine gives the file's pages back once programs hold them (host_pages), so
    # neither they nor the pages the quantizer read stay resident, and no second copy of them is made.
    out = {name: a for name, a in weights.items() if name not in q}
    for name, qt in q.items():
        out[name] = QuantizedArray(qt)
    return out, report


# -- W8A8 (experimental): int8 activations at the inputs of the int8 linears ---------------------------

#: the activation dtypes ``load(activations=...)`` and ``--activations`` take
ACTIVATION_SCHEMES = ACTIVATION_DTYPES
#: calibration tokens used at most (the float64 reference runs them once)
CALIBRATION_TOKENS = 512
W8A8_WARNING = ("W8A8 (int8 activations) is experimental: static per-tensor scales, accuracy as reported by "
                "orion quality --activations int8")


class ExperimentalWarning(UserWarning):
    """A feature whose numbers and interface may still change (W8A8)."""


def check_w8a8(quantize, activations, calibration) -> None:
    """Raises :class:`InputError` for an activation setting that is not W8A8 (int8 weights + int8 activations)."""
    if activations is None:
        if calibration is not None:
            raise InputError("calibration is only used with activations='int8' (W8A8); pass both or neither")
        return
    if activations not in ACTIVATION_SCHEMES:
        raise InputError(f"activations must be one of {', '.join(ACTIVATION_SCHEMES)} (or None for fp16 "
                         f"activations), got {activations!r}")
    if quantize != "int8":
        raise InputError(f"activations={activations!r} quantizes the inputs of int8 linears (W8A8): it needs "
                         f"quantize='int8', got quantize={quantize!r}")


def calibration_tokens(model, calibration) -> list[int]:
    """Token ids of a calibration text (encoded as a prompt: the tokenizer's special tokens / BOS) or ids."""
    if isinstance(calibration, str):
        if not calibration.strip():
            raise InputError("the calibration text is empty; pass a text of the kind the model will see")
        if model.tokenizer is None:
            raise InputError(f"model {model.name!r} has no tokenizer to encode the calibration text; pass token "
                             f"ids or load it with tokenizer=PATH")
        ids = model.tokens(calibration)
    elif isinstance(calibration, np.ndarray) or isinstance(calibration, (list, tuple)):
        arr = np.asarray(calibration)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise InputError(f"calibration token ids must be a flat sequence of ints, got {arr.dtype} "
                             f"{list(arr.shape)}")
        ids = [int(t) for t in arr]
    else:
        raise InputError(f"calibration must be a text, token ids or ActivationScales, got {type(calibration).__name__}")
    if not ids:
        raise InputError("calibration gives no tokens: pass a non-empty text or token ids")
    return ids[:CALIBRATION_TOKENS]


def activation_scales(model, fp16_weights: dict, calibration, method: str = "max") -> ActivationScales:
    """The static scales of a W8A8 ``model`` (its linears already int8): ``calibration`` as given
    (:class:`ActivationScales`, checked against the model's linears) or calibrated on the fp16 weights
    from a text / token ids."""
    names = sorted(n for n, v in model.weights.items() if isinstance(v, QuantizedArray))
    if isinstance(calibration, ActivationScales):
        calibration.check_names(names, f"activation scales for {model.name!r}")
        return calibration
    if calibration is None:
        raise InputError("activations='int8' needs calibration: a text, token ids or ActivationScales (load() "
                         "reads a saved activation_scales.json of the model when calibration is omitted)")
    ids = calibration_tokens(model, calibration)
    return calibrate(model.config, fp16_weights, ids, names, method=method)
