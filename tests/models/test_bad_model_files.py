"""Malformed checkpoint files end in a ModelFormatError that names the file and the problem — never a
bare ValueError/TypeError/RecursionError or a huge allocation."""

from __future__ import annotations

import json
import shutil
import struct

import pytest

from orion.errors import ModelFormatError
from orion.models.loaders import read_checkpoint
from orion.native.safetensors import SafetensorsFile

from ckpt_writers import write_hf_llama
from models_helpers import tiny_llama, weights16


@pytest.fixture
def hf_dir(tmp_path):
    cfg = tiny_llama(n_layers=1)
    write_hf_llama(tmp_path / "m", cfg, weights16(cfg), shard=True)
    return tmp_path / "m"


def _raw_safetensors(path, header: dict, data: bytes = b""):
    h = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(h)) + h + data)


@pytest.mark.parametrize("weight_map", [[], "model.safetensors", {"a": 5}, {"a": "../../etc/passwd"}, None])
def test_malformed_shard_index(hf_dir, weight_map):
    idx = hf_dir / "model.safetensors.index.json"
    idx.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(hf_dir))
    assert "weight_map" in str(e.value) and str(idx) in str(e.value)


def test_deeply_nested_config(hf_dir):
    (hf_dir / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(hf_dir))
    assert "config.json" in str(e.value) and "nested" in str(e.value)


def test_config_json_that_is_a_folder(hf_dir):
    (hf_dir / "config.json").unlink()
    (hf_dir / "config.json").mkdir()
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(hf_dir))
    assert "config.json" in str(e.value)


def test_safetensors_shape_whose_product_overflows(tmp_path):
    p = tmp_path / "x.safetensors"
    _raw_safetensors(p, {"w": {"dtype": "F32", "shape": [2 ** 32, 2 ** 32, 2 ** 8], "data_offsets": [0, 0]}})
    with pytest.raises(ModelFormatError) as e:
        SafetensorsFile(str(p))
    assert "'w'" in str(e.value) and str(p) in str(e.value)


@pytest.mark.parametrize("meta", [[1, 2], {"a": 1}, "text"])
def test_safetensors_metadata_of_the_wrong_type(tmp_path, meta):
    p = tmp_path / "x.safetensors"
    _raw_safetensors(p, {"__metadata__": meta, "w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
                     b"\0" * 4)
    with pytest.raises(ModelFormatError) as e:
        SafetensorsFile(str(p))
    assert "__metadata__" in str(e.value)
