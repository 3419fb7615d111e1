"""load(path, quantize=...) keeps the compressed weights beside the weight cache entry: the first load quantizes
and writes them (atomically), a later load maps them instead of quantizing again - the same operands, the
same tokens -, a corrupt entry is rebuilt with a warning, and use_cache=False writes nothing."""

from __future__ import annotations

import logging
import os

import numpy as np

import orion.models.quantize as quantize_mod
import pytest

from orion.models import load
from orion.models.quantize import quantized_cache_entry
from orion.quant import QuantizedArray
from orion.quant.store import tensor_arrays

FX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")
IDS = [3, 4, 5, 6, 7]


def _operands(m):
    return {n: [np.asarray(a).tobytes() for a in tensor_arrays(w.quant)]
            for n, w in m.weights.items() if isinstance(w, QuantizedArray)}


def _entry(cache, scheme):
    root = os.path.join(cache, "weights")
    (stem,) = [e[:-len(".safetensors")] for e in os.listdir(root) if e.count(".") == 1]
    return quantized_cache_entry(os.path.join(root, stem + ".safetensors"), scheme)


@pytest.mark.parametrize("scheme", ["int8", "lut4"])
def test_a_second_load_maps_the_compressed_weights_instead_of_quantizing(scheme, tmp_path, monkeypatch):
    cache = str(tmp_path)
    first = load(FX, cache=cache, quantize=scheme)
    want = first.generate(IDS, max_tokens=4, temperature=0).tokens
    assert os.path.exists(_entry(cache, scheme))

    def refuse(*a, **k):
        raise AssertionError("quantized again")
    monkeypatch.setattr(quantize_mod, "quantize_weights", refuse)
    again = load(FX, cache=cache, quantize=scheme)
    assert _operands(again) == _operands(first)
    assert again.quantization == first.quantization
    assert again.generate(IDS, max_tokens=4, temperature=0).tokens == want


def test_a_corrupt_entry_is_rebuilt_with_a_warning(tmp_path, caplog):
    cache = str(tmp_path)
    want = _operands(load(FX, cache=cache, quantize="int8"))
    entry = _entry(cache, "int8")
    with open(entry, "r+b") as f:                    # a garbled header
        f.seek(8)
        f.write(b"\0garbage\0" * 4)
    with caplog.at_level(logging.WARNING, logger="orion"):
        m = load(FX, cache=cache, quantize="int8")
    assert any("rebuilding corrupt compressed-weight cache entry" in r.message for r in caplog.records)
    assert _operands(m) == want
    assert _operands(load(FX, cache=cache, quantize="int8")) == want          # the rebuilt entry reads back


def test_schemes_have_entries_of_their_own_and_use_cache_false_writes_none(tmp_path):
    cache = str(tmp_path)
    load(FX, cache=cache, quantize="int8")
    load(FX, cache=cache, quantize="int4")
    assert _entry(cache, "int8") != _entry(cache, "int4")
    assert os.path.exists(_entry(cache, "int8")) and os.path.exists(_entry(cache, "int4"))
    other = str(tmp_path / "none")
    m = load(FX, cache=other, use_cache=False, quantize="int8")
    assert not os.path.exists(os.path.join(other, "weights"))
    assert m.generate(IDS, max_tokens=2, temperature=0).tokens


def test_an_entry_made_from_other_weights_is_not_used(tmp_path, caplog):
    """Passed a weight cache entry that is not where these weights came from, the entry beside it (made from
    the entry's own weights) is refused - its fingerprint differs - and rebuilt from the weights given."""
    from orion.models import Model
    from orion.models.loaders import load_weights
    cache = str(tmp_path)
    ck = load_weights(FX, cache=cache)
    load(FX, cache=cache, quantize="int8")                        # the entry of the checkpoint's own weights
    other = {k: (np.asarray(v) * np.float16(0.5)).astype(np.float16) for k, v in ck.weights.items()}
    want = _operands(Model(ck.config, other, quantize="int8"))      # no cache: quantized from `other`
    with caplog.at_level(logging.WARNING, logger="orion"):
        m = Model(ck.config, other, quantize="int8", weights_cache=ck.cache_file)
    assert any("made from other weights" in r.message for r in caplog.records)
    assert _operands(m) == want
