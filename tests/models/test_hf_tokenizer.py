"""tokenizer.json through the `tokenizers` library: encode (with and without special tokens) and decode
equal transformers' AutoTokenizer on every committed fixture; tokenizer_config.json supplies added and
special tokens; the one discovery rule (tokenizer.json first, smaller-than-model allowed, larger refused);
BOS is never added twice; the stop ids a checkpoint declares."""

from __future__ import annotations

import json
import os
import shutil

import pytest

pytest.importorskip("tokenizers")

from orion.errors import ModelFormatError  # noqa: E402
from orion.models import Model  # noqa: E402
from orion.models.tokenizers import (HFTokenizer, SentencePieceTokenizer, find_tokenizer,  # noqa: E402
                                     load_tokenizer, stop_token_ids)

from models_helpers import data_file, tiny_llama  # noqa: E402

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
NAMES = ["llama3", "smollm2", "llama_linear", "llama_legacy_keys", "qwen2", "qwen3", "mistral", "gemma3", "phi3"]
NAMES += sorted(n for n in (os.listdir(FIXTURES) if os.path.isdir(FIXTURES) else [])   # fixtures added later
                if n not in NAMES and os.path.isfile(os.path.join(FIXTURES, n, "tokenizer_cases.json")))


def fixture(name: str) -> str:
    d = os.path.join(FIXTURES, name)
    if not os.path.isdir(d):
        pytest.skip(f"fixture folder tests/fixtures/models/{name} not generated yet (scripts/make_model_fixtures.py)")
    return d


def _json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("name", NAMES)
def test_encode_decode_equal_transformers(name):
    d = fixture(name)
    tok = load_tokenizer(d)
    assert isinstance(tok, HFTokenizer)
    cases = _json(os.path.join(d, "tokenizer_cases.json"))
    assert cases
    for c in cases:
        assert tok.encode(c["text"], add_special_tokens=True) == c["ids"], c["text"]
        assert tok.encode(c["text"]) == c["ids_no_special"], c["text"]
        assert tok.decode(c["ids"]) == c["decoded"], c["text"]


def _tiny_folder(tmp_path, name: str, config: dict | None = None):
    """A copy of a fixture's tokenizer files, with tokenizer_config.json replaced by ``config``."""
    src = fixture(name)
    d = tmp_path / name
    d.mkdir()
    shutil.copy(os.path.join(src, "tokenizer.json"), d / "tokenizer.json")
    if config is not None:
        (d / "tokenizer_config.json").write_text(json.dumps(config))
    return d


def test_config_adds_missing_tokens_and_names_special_ones(tmp_path):
    d = _tiny_folder(tmp_path, "llama3", {
        "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "pad_token": "<|my_pad|>",
        "added_tokens_decoder": {"500": {"content": "<|tool|>", "special": True, "lstrip": False, "rstrip": False,
                                         "normalized": False, "single_word": False}}})
    tok = HFTokenizer(str(d / "tokenizer.json"))
    base = HFTokenizer(os.path.join(fixture("llama3"), "tokenizer.json"))
    # a token only the config knows is added (one id, matched whole inside text), as are named ones
    tid = tok.token_id("<|tool|>")
    assert tid is not None and base.token_id("<|tool|>") is None
    assert tok.encode("a<|tool|>b") == base.encode("a") + [tid] + base.encode("b")
    assert tok.token_id("<|my_pad|>") is not None
    assert tok.special_tokens["pad_token"] == "<|my_pad|>" and tok.bos_id == base.bos_id
    assert tok.vocab_size == max(tid, tok.token_id("<|my_pad|>")) + 1
    # special tokens are dropped on request
    assert tok.decode([tid] + base.encode("hi"), skip_special_tokens=True) == "hi"


def test_legacy_special_tokens_map(tmp_path):
    d = _tiny_folder(tmp_path, "llama3", {})
    (d / "special_tokens_map.json").write_text(json.dumps({"bos_token": {"content": "<|begin_of_text|>"},
                                                           "eos_token": "<|eot_id|>"}))
    tok = HFTokenizer(str(d / "tokenizer.json"))
    assert tok.special_tokens == {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
    assert tok.eos_id == tok.token_id("<|eot_id|>") is not None


def test_post_processor_decides_special_tokens(tmp_path):
    # transformers 5 ignores add_bos_token / add_eos_token when a tokenizer.json is present: its
    # post-processor alone decides (Llama 3's adds BOS, Qwen's nothing)
    d = _tiny_folder(tmp_path, "llama3", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                                          "add_bos_token": False, "add_eos_token": True})
    tok = HFTokenizer(str(d / "tokenizer.json"))
    assert tok.adds_special_tokens
    assert tok.encode("hi", add_special_tokens=True) == [tok.bos_id] + tok.encode("hi")
    q = HFTokenizer(os.path.join(fixture("qwen3"), "tokenizer.json"))
    assert not q.adds_special_tokens and q.bos_id is None
    assert q.encode("hi", add_special_tokens=True) == q.encode("hi")


def test_bad_tokenizer_files_name_the_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": 3}')
    with pytest.raises(ModelFormatError, match="tokenizer.json"):
        HFTokenizer(str(tmp_path / "tokenizer.json"))
    d = _tiny_folder(tmp_path, "llama3")
    (d / "tokenizer_config.json").write_text("{not json")
    with pytest.raises(ModelFormatError, match="tokenizer_config.json"):
        HFTokenizer(str(d / "tokenizer.json"))
    (d / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {"x": {"content": "a"}}}))
    with pytest.raises(ModelFormatError, match="added_tokens_decoder"):
        HFTokenizer(str(d / "tokenizer.json"))
    tok = HFTokenizer(os.path.join(fixture("llama3"), "tokenizer.json"))
    with pytest.raises(ModelFormatError, match="negative token id"):
        tok.decode([-1])


def test_ids_of_padded_embedding_rows_decode_to_nothing():
    # the model may have more rows than the tokenizer has tokens (Qwen); transformers decodes them as ""
    tok = HFTokenizer(os.path.join(fixture("qwen3"), "tokenizer.json"))
    ab = tok.encode("ab")
    assert tok.decode(ab[:1] + [tok.vocab_size, tok.vocab_size + 100] + ab[1:]) == "ab"


def test_discovery_prefers_tokenizer_json_and_checks_size(tmp_path):
    d = _tiny_folder(tmp_path, "qwen3", _json(os.path.join(fixture("qwen3"), "tokenizer_config.json")))
    shutil.copy(data_file("llama2-tokenizer.model"), d / "tokenizer.model")
    n = HFTokenizer(str(d / "tokenizer.json")).vocab_size
    assert isinstance(find_tokenizer(str(d), tiny_llama(vocab_size=n)), HFTokenizer)
    # padded embeddings (more rows than tokens, as real Qwen) are fine; a larger tokenizer is not
    assert find_tokenizer(str(d), tiny_llama(vocab_size=n + 37)).vocab_size == n
    with pytest.raises(ModelFormatError, match="vocab_size"):
        find_tokenizer(str(d), tiny_llama(vocab_size=n - 1))
    # without tokenizer.json the SentencePiece model is found, as before
    os.remove(d / "tokenizer.json")
    assert isinstance(find_tokenizer(str(d), tiny_llama(vocab_size=32000)), SentencePieceTokenizer)


def test_bos_is_added_once(tmp_path):
    llama3 = load_tokenizer(fixture("llama3"))
    cfg = tiny_llama(vocab_size=512, bos_id=llama3.bos_id)
    m = Model(cfg, {}, llama3)
    ids = m.encode("Once upon a time")
    assert ids == llama3.encode("Once upon a time", add_special_tokens=True)
    assert ids[0] == llama3.bos_id and ids[1] != llama3.bos_id
    # a tokenizer.json that adds nothing (SmolLM2) gets nothing from the model either
    smol = load_tokenizer(fixture("smollm2"))
    m = Model(tiny_llama(vocab_size=512, bos_id=1), {}, smol)
    assert m.encode("Once upon a time") == smol.encode("Once upon a time")
    assert m.encode("") == [1]                                      # empty prompts start from BOS
    # SentencePiece keeps the model-side BOS
    sp = SentencePieceTokenizer(data_file("llama2-tokenizer.model"))
    m = Model(tiny_llama(vocab_size=32000), {}, sp)
    assert m.encode("Hello") == [1] + sp.encode("Hello")


def test_stop_token_ids_from_config_generation_config_and_tokenizer(tmp_path):
    d = _tiny_folder(tmp_path, "qwen3", _json(os.path.join(fixture("qwen3"), "tokenizer_config.json")))
    (d / "config.json").write_text(json.dumps({"eos_token_id": 384}))
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": [384, 385]}))
    tok = HFTokenizer(str(d / "tokenizer.json"))
    assert tok.eos_id == tok.token_id("<|im_end|>") not in (384, 385)
    assert stop_token_ids(str(d), tok) == [384, 385, tok.eos_id]
    (d / "generation_config.json").write_text(json.dumps({"eos_token_id": "x"}))
    with pytest.raises(ModelFormatError, match="generation_config.json"):
        stop_token_ids(str(d), tok)


def test_train_init_uses_the_same_discovery(tmp_path, capsys):
    # orion train --init <HF folder> on text finds the folder's tokenizer.json (before: "needs the model's
    # tokenizer"); Qwen-style tokenizers without BOS separate documents with their EOS
    import numpy as np

    from ckpt_writers import write_hf_llama
    from models_helpers import weights16
    from orion.cli.train import main
    from orion.train import data as D
    d = _tiny_folder(tmp_path, "llama3", _json(os.path.join(fixture("llama3"), "tokenizer_config.json")))
    cfg = tiny_llama(vocab_size=400, n_ctx=64)
    write_hf_llama(d, cfg, {k: v.astype(np.float32) for k, v in weights16(cfg, seed=1).items()})
    (tmp_path / "text.txt").write_text("Once upon a time there was a fox.\n\nThe fox liked to play. " * 40)
    assert main(["--model", str(d), "--data", str(tmp_path / "text.txt"), "--steps", "1", "--batch", "1",
                 "--seq-len", "32", "--no-ckpt", "--no-progress", "--sample-tokens", "0"]) == 0
    assert "loss" in capsys.readouterr().out
    q = load_tokenizer(fixture("qwen3"))
    ids = D.encode_documents(["a b", "c"], q)
    assert ids.tolist() == [q.eos_id] + q.encode("a b") + [q.eos_id] + q.encode("c")
