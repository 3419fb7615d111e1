"""HF config.json values of the wrong type that test_family_configs.py does not try: a ModelFormatError
naming config.json and the key."""

from __future__ import annotations

import copy
import json
import os

import pytest

from orion.errors import ModelFormatError
from orion.models.config import config_from_hf

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")


def _base(name):
    with open(os.path.join(FIXTURES, name, "config.json")) as f:
        return json.load(f)


CASES = [
    ("llama3", {"rope_theta": "abc"}, "rope_theta"),                 # beside rope_parameters
    ("llama3", {"rope_theta": [1]}, "rope_theta"),
    ("llama3", {"rope_scaling": [1, 2]}, "rope_scaling"),
    ("llama_legacy_keys", {"rope_theta": "abc"}, "rope_theta"),
    ("llama_legacy_keys", {"rope_scaling": "linear"}, "rope_scaling"),
    ("llama3", {"max_position_embeddings": "256"}, "max_position_embeddings"),
    ("llama3", {"vocab_size": 512.5}, "vocab_size"),
    ("llama3", {"vocab_size": True}, "vocab_size"),
    ("llama3", {"num_key_value_heads": 3}, "n_kv_heads 3"),
    ("llama3", {"eos_token_id": ["a"]}, "eos_token_id"),
    ("llama3", {"bos_token_id": 1.5}, "bos_token_id"),
    ("llama3", {"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ("llama3", {"rms_norm_eps": float("nan")}, "rms_norm_eps"),
    ("llama3", {"model_type": ["llama"]}, "model_type"),
    ("gemma3", {"sliding_window": 0}, "sliding_window"),
    ("gemma3", {"query_pre_attn_scalar": "x"}, "query_pre_attn_scalar"),
]


@pytest.mark.parametrize("name,patch,needle", CASES, ids=[f"{c[0]}-{list(c[1])[0]}={c[1][list(c[1])[0]]!r}"
                                                          for c in CASES])
def test_bad_config_value(name, patch, needle):
    d = copy.deepcopy(_base(name))
    d.update(patch)
    with pytest.raises(ModelFormatError) as e:
        config_from_hf(d, "m/config.json")
    assert needle in str(e.value) and "m/config.json" in str(e.value)


def test_config_that_is_not_an_object():
    with pytest.raises(ModelFormatError, match="m/config.json: expected a JSON object"):
        config_from_hf([1, 2], "m/config.json")


@pytest.mark.parametrize("layers", [10 ** 9, 10 ** 7, 3, 1])
def test_a_layer_count_the_weights_do_not_have_is_refused_at_once(layers, tmp_path):
    """Sizes come from the file only after the file agrees: num_hidden_layers 10^9 in a config.json used to
    build per-layer tables for minutes (or run out of memory) before any tensor was compared."""
    import shutil
    import time
    from orion.models.loaders import read_checkpoint
    folder = tmp_path / "m"
    shutil.copytree(os.path.join(FIXTURES, "llama3"), folder)
    conf = _base("llama3")
    conf["num_hidden_layers"] = layers
    (folder / "config.json").write_text(json.dumps(conf))
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    t = time.perf_counter()
    with pytest.raises(ModelFormatError, match=rf"says {layers} layers .* the weights hold 2 \(layers 0\.\.1"):
        read_checkpoint(str(folder))
    assert time.perf_counter() - t < 1.0
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before          # nothing on disk changed


def test_bad_engine_options_of_the_depth_and_fp16_work_are_typed_errors(tmp_path, capsys):
    """layers=, probe_ids= and `orion info --model M --quantize Q` refuse bad values with typed errors before
    any work."""
    from orion.cli import main
    from orion.errors import InputError
    from orion.models import load
    path = os.path.join(FIXTURES, "llama3")
    with pytest.raises(InputError, match="layers must be one of auto, baked, shared"):
        load(path, device="sim", layers="deep").engine
    for bad in ([], [10 ** 6], ["a"], [1.5], [True], list(range(300)), 5):
        with pytest.raises(InputError, match="probe_ids must be 1 to 256 integer token ids"):
            load(path, device="sim", probe_ids=bad).engine
    with pytest.raises(SystemExit) as e:                     # a bad flag: exit 2 before loading anything
        main(["info", "--model", path, "--quantize", "int9"])
    assert e.value.code == 2 and "invalid choice: 'int9'" in capsys.readouterr().err
