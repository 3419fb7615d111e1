"""Compressed weights stored as one safetensors file (orion.quant.store): every scheme round-trips bit for bit
(operands, report, what the constexpr op computes) as memory-mapped views; a file that does not match - a
truncated payload, a shape that is not the model's, a report that disagrees, another store format - is a
ModelFormatError naming the file, never a silently different weight."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from orion.errors import ModelFormatError
from orion.models import host_pages
from orion.models.config import LlamaConfig
from orion.models.loaders import expected_shapes
from orion.native.safetensors import SafetensorsFile, write_safetensors
from orion.quant import SCHEMES, quantize_weights
from orion.quant.store import read_quantized, tensor_arrays, write_quantized


def _weights(seed=0):
    cfg = LlamaConfig(d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, vocab_size=64, n_ctx=32)
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal(s) * 0.1).astype(np.float16) for k, s in expected_shapes(cfg).items()}


def _operand_bits(q):
    return [np.ascontiguousarray(a).view(np.uint8).tobytes() for a in tensor_arrays(q)]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_scheme_round_trips_bit_for_bit_as_mapped_views(scheme, tmp_path):
    w = _weights()
    q, report = quantize_weights(w, scheme, fit=True)
    path = str(tmp_path / "q.safetensors")
    write_quantized(path, q, report)
    back, rep2, _meta = read_quantized(path, shapes={k: v.shape for k, v in w.items()})
    assert set(back) == set(q) and rep2 == report
    for name in q:
        assert type(back[name]) is type(q[name])
        assert _operand_bits(back[name]) == _operand_bits(q[name])
        assert np.array_equal(back[name].dequantize().view(np.uint16), q[name].dequantize().view(np.uint16))
        assert all(host_pages.map_of(a) is not None for a in tensor_arrays(back[name]))   # zero-copy


def _stored(tmp_path, scheme="int8"):
    w = _weights()
    q, report = quantize_weights(w, scheme, fit=True)
    path = str(tmp_path / "q.safetensors")
    write_quantized(path, q, report)
    return w, q, path


def _rewrite(path, tensors=None, metadata=None):
    st = SafetensorsFile(path)
    t = {n: np.array(st.get(n)) for n in st.names}
    m = dict(st.metadata)
    t.update(tensors or {})
    m.update(metadata or {})
    os.unlink(path)
    write_safetensors(path, t, m)


def test_a_truncated_payload_is_refused(tmp_path):
    w, q, path = _stored(tmp_path)
    name = next(iter(q))
    st = SafetensorsFile(path)
    key = next(n for n in st.names if n.startswith(name + "/"))
    _rewrite(path, tensors={key: np.array(st.get(key))[:-1]})
    with pytest.raises(ModelFormatError, match="q.safetensors"):
        read_quantized(path, shapes={k: v.shape for k, v in w.items()})


def test_a_shape_that_is_not_the_models_is_refused(tmp_path):
    w, q, path = _stored(tmp_path)
    shapes = {k: v.shape for k, v in w.items()}
    name = next(iter(q))
    shapes[name] = (shapes[name][0] + 1, shapes[name][1])
    with pytest.raises(ModelFormatError, match=name):
        read_quantized(path, shapes=shapes)


def test_a_report_that_disagrees_or_another_format_is_refused(tmp_path):
    _w, q, path = _stored(tmp_path)
    rep = json.loads(SafetensorsFile(path).metadata["orion_report"])
    rep["tensors"].pop(next(iter(q)))
    _rewrite(path, metadata={"orion_report": json.dumps(rep)})
    with pytest.raises(ModelFormatError):
        read_quantized(path)
    _stored(tmp_path)
    _rewrite(path, metadata={"orion_store_format": "999"})
    with pytest.raises(ModelFormatError, match="store format"):
        read_quantized(path)
    _rewrite(path, metadata={"orion_quantized": "{not json"})
    with pytest.raises(ModelFormatError, match="q.safetensors"):
        read_quantized(path)
