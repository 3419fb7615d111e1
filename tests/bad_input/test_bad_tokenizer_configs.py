"""Wrong-typed and oversized tokenizer_config.json / special_tokens_map.json keys:
every key orion reads is typed as transformers types it, so a wrong type is a ModelFormatError naming the
file, the key and the expected type (never a bare TypeError, never "abc" read as the special tokens a, b
and c, never "false" read as true), and sizes are bounded before any work. The folder is left as it was."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

pytest.importorskip("tokenizers")

from orion.errors import ModelFormatError
from orion.models.tokenizers import (
    hf_tokenizer,
    load_tokenizer,
)

SRC = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")
TOKEN = "must be a token string or an AddedToken object"
BOOL = "must be true or false"


def _entry(**kw):
    return {"128000": dict({"content": "<|begin_of_text|>", "lstrip": False, "normalized": False, "rstrip": False,
                            "single_word": False, "special": True}, **kw)}


CONFIG_CASES = [
    # added_tokens_decoder
    ("content a number", {"added_tokens_decoder": _entry(content=5)}, "added_tokens_decoder.128000", TOKEN),
    ("content a list", {"added_tokens_decoder": _entry(content=["<s>"])}, "added_tokens_decoder.128000", TOKEN),
    ("content empty", {"added_tokens_decoder": _entry(content="")}, "added_tokens_decoder.128000", TOKEN),
    ("content missing", {"added_tokens_decoder": {"7": {"special": True}}}, "added_tokens_decoder", "no 'content'"),
    ("entry a string", {"added_tokens_decoder": {"7": "<s>"}}, "added_tokens_decoder", "no 'content'"),
    ("special a string", {"added_tokens_decoder": _entry(special="yes")}, "'special'", BOOL),
    ("lstrip a number", {"added_tokens_decoder": _entry(lstrip=1)}, "'lstrip'", BOOL),
    ("normalized null", {"added_tokens_decoder": _entry(normalized=None)}, "'normalized'", BOOL),
    ("id not a number", {"added_tokens_decoder": {"abc": {"content": "<x>"}}}, "'abc'", "is not a token id"),
    ("id a superscript digit", {"added_tokens_decoder": {"²": {"content": "<x>"}}}, "'²'", "is not a token id"),
    ("id negative", {"added_tokens_decoder": {"-1": {"content": "<x>"}}}, "'-1'", "is not a token id"),
    ("id of 5000 digits", {"added_tokens_decoder": {"9" * 5000: {"content": "<x>"}}}, "added_tokens_decoder",
     "is not a token id"),
    ("a list", {"added_tokens_decoder": [{"content": "<x>"}]}, "added_tokens_decoder", "must be an object"),
    ("70,000 tokens", {"added_tokens_decoder": {str(i): {"content": f"<t{i}>"} for i in range(70_000)}},
     "added_tokens_decoder", "70,000 tokens"),
    ("a token of 5000 characters", {"added_tokens_decoder": _entry(content="x" * 5000)},
     "added_tokens_decoder.128000", "5,000 characters"),
    # the lists of special tokens
    ("extra_special_tokens a string", {"extra_special_tokens": "abc"}, "'extra_special_tokens'", "must be a list"),
    ("extra_special_tokens of numbers", {"extra_special_tokens": [1, 2]}, "extra_special_tokens[0]", TOKEN),
    ("extra_special_tokens named number", {"extra_special_tokens": {"image_token": 5}},
     "extra_special_tokens.image_token", TOKEN),
    ("extra_special_tokens with a bad flag", {"extra_special_tokens": [{"content": "<i>", "rstrip": "no"}]},
     "'rstrip'", BOOL),
    ("additional_special_tokens a string", {"additional_special_tokens": "abc"}, "'additional_special_tokens'",
     "must be a list of tokens"),
    ("additional_special_tokens an object", {"additional_special_tokens": {"a": "<a>"}},
     "'additional_special_tokens'", "must be a list of tokens"),
    ("70,000 extra special tokens", {"extra_special_tokens": [f"<t{i}>" for i in range(70_000)]},
     "extra_special_tokens", "70,000 tokens"),
    # flags
    ("split_special_tokens a string", {"split_special_tokens": "false"}, "'split_special_tokens'", BOOL),
    ("split_special_tokens a number", {"split_special_tokens": 0}, "'split_special_tokens'", BOOL),
    ("clean_up_tokenization_spaces a string", {"clean_up_tokenization_spaces": "true"},
     "'clean_up_tokenization_spaces'", BOOL),
    # named special tokens
    ("bos_token a list", {"bos_token": ["<s>"]}, "'bos_token'", TOKEN),
    ("eos_token content a number", {"eos_token": {"content": 5}}, "'eos_token'", TOKEN),
    ("pad_token with a string flag", {"pad_token": {"content": "<pad>", "special": "true"}}, "'special'", BOOL),
    ("unk_token of 5000 characters", {"unk_token": "u" * 5000}, "'unk_token'", "5,000 characters"),
    ("mask_token true", {"mask_token": True}, "'mask_token'", TOKEN),
    ("a lone surrogate", {"eos_token": "\ud800"}, "'eos_token'", "not valid Unicode"),
    # chat templates
    ("chat_template an object", {"chat_template": {"default": "x"}}, "chat_template", "must be a string"),
    ("chat_template entry without a string", {"chat_template": [{"name": "default", "template": 5}]},
     "chat_template", "must be a string"),
    ("chat_template of 300,000 characters", {"chat_template": "x" * 300_000}, "chat_template",
     "300,000 characters"),
    ("named chat_template too long", {"chat_template": [{"name": "default", "template": "x" * 300_000}]},
     "chat_template", "300,000 characters"),
]


def _folder(tmp_path, config=None, extra_files=None):
    d = tmp_path / "model"
    d.mkdir()
    shutil.copy(os.path.join(SRC, "tokenizer.json"), d / "tokenizer.json")
    with open(os.path.join(SRC, "tokenizer_config.json")) as f:
        base = json.load(f)
    (d / "tokenizer_config.json").write_text(json.dumps(dict(base, **(config or {}))))
    for name, content in (extra_files or {}).items():
        (d / name).write_text(content if isinstance(content, str) else json.dumps(content))
    return d


def _snapshot(d):
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.iterdir())}


def _refused(d, *needles, file="tokenizer_config.json"):
    before = _snapshot(d)
    t0 = time.perf_counter()
    with pytest.raises(ModelFormatError) as e:
        load_tokenizer(str(d))
    assert time.perf_counter() - t0 < 2.0
    msg = str(e.value)
    assert str(d / file) in msg and all(n in msg for n in needles), msg
    assert len(msg) < 600
    assert _snapshot(d) == before


@pytest.mark.parametrize("name,config,key,needle", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_wrong_typed_tokenizer_config_key(tmp_path, name, config, key, needle):
    _refused(_folder(tmp_path, config), key, needle)


LEGACY_CASES = [
    ("bos_token a number", {"bos_token": 5}, ("'bos_token'", TOKEN)),
    ("additional_special_tokens a string", {"additional_special_tokens": "abc"}, ("must be a list of tokens",)),
    ("a list", [1, 2], ("expected a JSON object",)),
]


@pytest.mark.parametrize("name,smap,needles", LEGACY_CASES, ids=[c[0] for c in LEGACY_CASES])
def test_wrong_typed_special_tokens_map(tmp_path, name, smap, needles):
    """special_tokens_map.json fills in for configs without added_tokens_decoder: typed the same way."""
    d = _folder(tmp_path, extra_files={"special_tokens_map.json": smap})
    _refused(d, *needles, file="special_tokens_map.json")


@pytest.mark.parametrize("name,limit", [("tokenizer.json", "MAX_TOKENIZER_JSON_BYTES"),
                                        ("tokenizer_config.json", "MAX_TOKENIZER_CONFIG_BYTES")])
def test_oversized_tokenizer_files_are_refused_before_reading(tmp_path, name, limit):
    d = _folder(tmp_path)
    with open(d / name, "r+b") as f:                     # sparse: costs no disk, would cost reading it
        f.truncate(getattr(hf_tokenizer, limit) + 1)
    _refused(d, "bytes, more than any real", file=name)


def test_oversized_chat_template_jinja(tmp_path):
    from orion.models.tokenizers import chat_prompt_ids
    d = _folder(tmp_path)
    with open(d / "chat_template.jinja", "wb") as f:
        f.truncate(1 << 30)
    before = _snapshot(d)
    tok = load_tokenizer(str(d))
    with pytest.raises(ModelFormatError, match=r"chat_template\.jinja: 1,073,741,824 bytes"):
        chat_prompt_ids(tok, [{"role": "user", "content": "Hi"}])
    assert _snapshot(d) == before


def test_right_types_and_nulls_still_load(tmp_path):
    """The spellings transformers writes load as before: AddedToken objects with flags, nulls for absent
    keys, an empty token string meaning none, extra_special_tokens as an object of names."""
    d = _folder(tmp_path, {"pad_token": None, "unk_token": "", "clean_up_tokenization_spaces": None,
                           "split_special_tokens": False, "mask_token": {"content": "<|mask|>", "special": True},
                           "extra_special_tokens": {"image_token": "<|image|>"},
                           "added_tokens_decoder": _entry()})
    tok = load_tokenizer(str(d))
    assert tok.special_tokens["bos_token"] == "<|begin_of_text|>" and "pad_token" not in tok.special_tokens
    assert "unk_token" not in tok.special_tokens and tok.extra_special_tokens == ["<|image|>"]
    assert tok.token_id("<|image|>") in tok.special_ids and tok.token_id("<|mask|>") in tok.special_ids
    assert tok.encode("<|image|>") == [tok.token_id("<|image|>")]
