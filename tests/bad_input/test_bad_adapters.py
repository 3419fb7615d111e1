"""Malformed PEFT adapter folders: typed Adapter*Errors (orion.OrionError) naming the file and the key or
tensor. Unsupported PEFT features and fused-module files are in
tests/lora/test_lora_files.py, config spec strings in test_lora_adapters.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from orion import lora as L
from orion.models import loaders
from orion.native.safetensors import SafetensorsFile, read_safetensors, write_safetensors

MODEL = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    """A q,v adapter of the llama3 fixture saved by orion: (model config, config dict, tensors, metadata)."""
    cfg = loaders.read_checkpoint(MODEL).config
    folder = tmp_path_factory.mktemp("ad") / "ad"
    L.init_adapter(cfg, L.LoraConfig(r=4, alpha=8, targets="q,v"), seed=1, b_std=0.05).save(str(folder))
    with open(folder / L.ADAPTER_CONFIG) as f:
        conf = json.load(f)
    st = folder / L.ADAPTER_WEIGHTS
    return cfg, conf, read_safetensors(str(st)), SafetensorsFile(str(st)).metadata


def _conf(**kw):
    return lambda c: dict(c, **kw)


def _tensors(fn):
    return lambda t: fn(dict(t))


def _first(t, value):
    k = sorted(t)[0]
    t[k] = value(t[k])
    return t


CASES = [
    ("config missing", dict(conf=None), L.AdapterFormatError, "adapter_config.json"),
    ("tensors missing", dict(tensors=None), L.AdapterFormatError, "adapter_model.safetensors"),
    ("config not JSON", dict(raw=b"{x"), L.AdapterFormatError, "not valid JSON"),
    ("config a list", dict(conf=lambda c: [1]), L.AdapterFormatError, "JSON object"),
    ("config nested too deeply", dict(raw=b"[" * 100_000), L.AdapterFormatError, "nested too deeply"),
    ("r missing", dict(conf=lambda c: {k: v for k, v in c.items() if k != "r"}), L.AdapterFormatError, "'r'"),
    ("r zero", dict(conf=_conf(r=0)), L.AdapterConfigError, "rank"),
    ("r a string", dict(conf=_conf(r="4")), L.AdapterConfigError, "rank"),
    ("r differs from the tensors", dict(conf=_conf(r=8)), L.AdapterShapeError, "rank mismatch"),
    ("lora_alpha a string", dict(conf=_conf(lora_alpha="x")), L.AdapterConfigError, "lora_alpha"),
    ("peft_type IA3", dict(conf=_conf(peft_type="IA3")), L.AdapterFormatError, "IA3"),
    ("target_modules a number", dict(conf=_conf(target_modules=5)), L.AdapterConfigError, "target_modules"),
    ("target_modules match nothing", dict(conf=_conf(target_modules=["nothing"])), L.AdapterConfigError,
     "unknown target module 'nothing'"),
    ("target_modules regex matches nothing", dict(conf=_conf(target_modules=".*nothing.*")), L.AdapterConfigError,
     "matches no linear"),
    ("layers_to_transform out of range", dict(conf=_conf(layers_to_transform=[99])), L.AdapterConfigError,
     "out of range"),
    ("layers_to_transform a string", dict(conf=_conf(layers_to_transform="x")), L.AdapterConfigError,
     "layers_to_transform"),
    ("lora_dropout a string", dict(conf=_conf(lora_dropout="x")), L.AdapterConfigError, "lora_dropout"),
    ("lora_dropout 1.5", dict(conf=_conf(lora_dropout=1.5)), L.AdapterConfigError, "lora_dropout"),
    ("rank_pattern a list", dict(conf=_conf(rank_pattern=[1])), L.AdapterConfigError, "rank_pattern"),
    ("no tensors", dict(tensors=lambda t: {}), L.AdapterFormatError, "no lora_A/lora_B"),
    ("lora_A of the wrong shape", dict(tensors=_tensors(lambda t: _first(t, lambda a: np.zeros((3, 3), np.float32)))),
     L.AdapterShapeError, "do not fit"),
    ("lora_A a vector", dict(tensors=_tensors(lambda t: _first(t, lambda a: np.zeros((4,), np.float32)))),
     L.AdapterShapeError, "matrices"),
    ("lora_B missing", dict(tensors=lambda t: {k: v for k, v in t.items() if "lora_B" not in k}),
     L.AdapterFormatError, "pairs"),
    ("NaN in a tensor", dict(tensors=_tensors(lambda t: _first(t, lambda a: np.full(a.shape, np.nan, np.float32)))),
     L.AdapterFormatError, "NaN"),
    ("a tensor of another model", dict(tensors=lambda t: dict(t, **{
        "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight": np.zeros((4, 32), np.float32)})),
     L.AdapterMismatch, "an adapter for a gpt2 model"),
]


@pytest.mark.parametrize("name,spec,exc,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_adapter(tmp_path, good, name, spec, exc, needle):
    cfg, conf, tensors, meta = good
    d = tmp_path / "ad"
    d.mkdir()
    if "raw" in spec:
        (d / L.ADAPTER_CONFIG).write_bytes(spec["raw"])
    elif spec.get("conf", 0) is not None:
        (d / L.ADAPTER_CONFIG).write_text(json.dumps(spec.get("conf", lambda c: c)(dict(conf))))
    if spec.get("tensors", 0) is not None:
        write_safetensors(str(d / L.ADAPTER_WEIGHTS), spec.get("tensors", lambda t: t)(dict(tensors)), meta)
    with pytest.raises(exc) as e:
        L.load(str(d), cfg)
    assert needle in str(e.value) and str(d) in str(e.value)


# adapter_config.json values of the wrong type: each a typed AdapterConfigError naming the
# file, the key and the pattern entry, before any tensor is read; nothing in the folder changes.
# (key, value, words of the message)
TYPE_CASES = [
    ("rank_pattern", {"q_proj": "8"}, ["rank_pattern['q_proj']", "positive integer rank", "'8'"]),
    ("rank_pattern", {"q_proj": 8.5}, ["rank_pattern['q_proj']", "positive integer rank", "8.5"]),
    ("rank_pattern", {"q_proj": -4}, ["rank_pattern['q_proj']", "positive integer rank", "-4"]),
    ("rank_pattern", {"q_proj": 0}, ["rank_pattern['q_proj']", "positive integer rank"]),
    ("rank_pattern", {"q_proj": True}, ["rank_pattern['q_proj']", "positive integer rank", "True"]),
    ("rank_pattern", {"q_proj": {"r": 4}}, ["rank_pattern['q_proj']", "positive integer rank", "{'r': 4}"]),
    ("rank_pattern", {"q_proj(": 4}, ["rank_pattern", "'q_proj('", "not a valid regex"]),
    ("rank_pattern", {"": 4}, ["rank_pattern", "non-empty"]),
    ("alpha_pattern", {"v_proj": "16"}, ["alpha_pattern['v_proj']", "positive finite number", "'16'"]),
    ("alpha_pattern", {"v_proj": -1.5}, ["alpha_pattern['v_proj']", "positive finite number", "-1.5"]),
    ("alpha_pattern", {"v_proj": False}, ["alpha_pattern['v_proj']", "positive finite number", "False"]),
    ("alpha_pattern", {"v_proj": float("inf")}, ["alpha_pattern['v_proj']", "positive finite number", "inf"]),
    ("alpha_pattern", {"v_proj": 10 ** 400}, ["alpha_pattern['v_proj']", "positive finite number"]),
    ("alpha_pattern", {"v_proj": [16]}, ["alpha_pattern['v_proj']", "positive finite number", "[16]"]),
    ("lora_alpha", True, ["lora_alpha", "positive finite number", "True"]),
    ("lora_alpha", 10 ** 400, ["lora_alpha", "positive finite number"]),
    ("r", 4.0, ["rank r", "positive integer", "4.0"]),
    ("r", True, ["rank r", "positive integer", "True"]),
    ("target_modules", ["q_proj", 7], ["target_modules", "[\'q_proj\', 7]"]),
    ("target_modules", {"q_proj": 1}, ["target_modules"]),
    ("use_rslora", "yes", ["use_rslora", "true or false", "'yes'"]),
    ("base_model_name_or_path", 5, ["base_model_name_or_path", "5"]),
]


@pytest.mark.parametrize("key,value,needles", TYPE_CASES, ids=[f"{c[0]}={c[1]!r:.30}" for c in TYPE_CASES])
def test_adapter_config_value_of_the_wrong_type(tmp_path, good, key, value, needles):
    cfg, conf, tensors, meta = good
    d = tmp_path / "ad"
    d.mkdir()
    (d / L.ADAPTER_CONFIG).write_text(json.dumps(dict(conf, **{key: value})))
    write_safetensors(str(d / L.ADAPTER_WEIGHTS), dict(tensors), meta)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    with pytest.raises(L.AdapterConfigError) as e:
        L.load(str(d), cfg)
    msg = str(e.value)
    assert str(d / L.ADAPTER_CONFIG) in msg and all(w in msg for w in needles), msg
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
