"""Malformed tokenizer.json / tokenizer_config.json beside a model: a ModelFormatError naming the file.
Truncated llama2.c tokenizer.bin, non-protobuf tokenizer.model and bad vocab.json are in
tests/models/test_tokenizers.py; `{"model": 3}`, a bad added_tokens_decoder in test_hf_tokenizer.py."""

from __future__ import annotations

import copy
import json
import os

import pytest

from orion.errors import ModelFormatError
from orion.models.tokenizers import load_tokenizer

pytest.importorskip("tokenizers")
SRC = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")


def _json(name):
    with open(os.path.join(SRC, name)) as f:
        return json.load(f)


def _model(**kw):
    t = copy.deepcopy(_json("tokenizer.json"))
    t["model"].update(kw)
    return t


def _top(**kw):
    t = copy.deepcopy(_json("tokenizer.json"))
    t.update(kw)
    return t


TOKENIZER_JSON = [
    ("empty", b""),
    ("not JSON", b"{x"),
    ("not UTF-8", b'{"\xff": 1}'),
    ("a list", [1]),
    ("nested too deeply", b"[" * 100_000),
    ("no model", {k: v for k, v in _json("tokenizer.json").items() if k != "model"}),
    ("unknown model type", _model(type="Unigram2")),
    ("vocab a list", _model(vocab=[1, 2])),
    ("vocab id a string", _model(vocab={"a": "x"})),
    ("negative vocab id", _model(vocab=dict(_json("tokenizer.json")["model"]["vocab"], zz=-1))),
    ("merges a number", _model(merges=5)),
    ("merge of unknown symbols", _model(merges=["qqqqqq zzzzzz"])),
    ("added_tokens an object", _top(added_tokens={"a": 1})),
    ("added token without id", _top(added_tokens=[{"content": "x"}])),
    ("unknown pre-tokenizer", _top(pre_tokenizer={"type": "Frobnicate"})),
    ("unknown normalizer", _top(normalizer={"type": "Frobnicate"})),
    ("unknown decoder", _top(decoder={"type": "Frobnicate"})),
]


@pytest.mark.parametrize("name,content", TOKENIZER_JSON, ids=[c[0] for c in TOKENIZER_JSON])
def test_bad_tokenizer_json(tmp_path, name, content):
    p = tmp_path / "tokenizer.json"
    p.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    with pytest.raises(ModelFormatError) as e:
        load_tokenizer(str(p))
    assert str(p) in str(e.value) and "tokenizer.json" in str(e.value)


TOKENIZER_CONFIG = [
    ("a list", [1], "expected a JSON object"),
    ("nested too deeply", b"[" * 100_000, "nested too deeply"),
    ("bos_token a number", dict(_json("tokenizer_config.json"), bos_token=5), "bos_token"),
    ("eos_token an object without content", dict(_json("tokenizer_config.json"), eos_token={"x": 1}), "eos_token"),
    ("chat_template a number", dict(_json("tokenizer_config.json"), chat_template=5), "chat_template"),
    ("chat_template a list of strings", dict(_json("tokenizer_config.json"), chat_template=["x"]), "chat_template"),
]


@pytest.mark.parametrize("name,content,needle", TOKENIZER_CONFIG, ids=[c[0] for c in TOKENIZER_CONFIG])
def test_bad_tokenizer_config(tmp_path, name, content, needle):
    (tmp_path / "tokenizer.json").write_text(json.dumps(_json("tokenizer.json")))
    p = tmp_path / "tokenizer_config.json"
    p.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    with pytest.raises(ModelFormatError) as e:
        load_tokenizer(str(tmp_path / "tokenizer.json"))
    assert needle in str(e.value) and str(p) in str(e.value)
