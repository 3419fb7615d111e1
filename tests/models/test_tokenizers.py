"""Tokenizers against the real files in shared/data.

GPT-2 BPE: golden ids (HF transformers' encodings), tiktoken built from the same vocab/merges files (when
importable) and an independent straightforward implementation of OpenAI's encoder.py with the `regex`
package (when importable), on a varied corpus (unicode, whitespace runs, contractions, emoji, numbers)
plus thousands of random strings. llama2.c tokenizer.bin vs SentencePiece on the same vocabulary."""

from __future__ import annotations

import json
import random

import pytest

from orion import ModelFormatError
from orion.models.tokenizers import (GPT2Tokenizer, Llama2cTokenizer, SentencePieceTokenizer, find_tokenizer,
                                     load_tokenizer)
from orion.models.tokenizers.gpt2_bpe import bytes_to_unicode, pretokenize

from models_helpers import data_file


GPT2_PAT = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

CORPUS = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", " Hello", "Hello  ", "123456789", "don't",
    "I'm here, you're there, they've gone, we'll see, he'd know, it's 'S 'T fine''s", "''''''s", "'ll'LL",
    "   leading spaces", "trailing spaces   ", "tabs\t\tand\nnewlines\n\n\nand\r\nCRLF", " \n \n ", "\u00a0nbsp\u2003em",
    "ideographic\u3000space", "line\u2028sep", "control\x1cchars\x1f", "日本語のテキストです。", "Ünïcödé façade naïve",
    "emoji 😀👍🏽 family 👨\u200d👩\u200d👧 flag 🇺🇸", "math ∑∫√ ≤≥ ½ ² ٣ Ⅻ", "numbers 3.14159, 1,000,000 and 2024-01-01",
    "mixed123abc456 x86_64 C++ <html><body>", "$$$ %%% ^^^ ***", "", " ", "\n", "a", "ǅ title-case",
    "Привет мир", "مرحبا بالعالم", "שלום", "नमस्ते दुनिया", "🙂" * 5, "x" * 300, "ab " * 50,
]


def _random_corpus(n=1500, seed=0):
    rnd = random.Random(seed)
    alphabet = list("abcXYZ019 '.,!?-_\n\t") + ["é", "ß", "中", "😀", "\u00a0", "\u2028", "\x1c", "½", "٣", "ǅ",
                                               " ", " ", "  ", "'s", "'ll", "\r\n"]
    return ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40))) for _ in range(n)]


@pytest.fixture(scope="module")
def gpt2():
    return GPT2Tokenizer(data_file("gpt2-vocab.json"), data_file("gpt2-merges.txt"))


def test_gpt2_golden_values(gpt2):
    assert gpt2.vocab_size == 50257 and gpt2.eos_id == 50256
    assert gpt2.encode("Hello, world!") == [15496, 11, 995, 0]
    assert gpt2.encode("The quick brown fox jumps over the lazy dog.") == [464, 2068, 7586, 21831, 18045, 625, 262,
                                                                            16931, 3290, 13]
    assert gpt2.encode(" Hello") == [18435]
    assert gpt2.encode("Hello  ") == [15496, 220, 220]
    assert gpt2.encode("123456789") == [10163, 2231, 3134, 4531]
    assert gpt2.encode("don't") == [9099, 470]
    assert gpt2.decode([15496, 11, 995, 0]) == "Hello, world!"
    m = bytes_to_unicode()
    assert m[32] == "\u0120" and m[10] == "\u010a" and m[0xAD] == "\u0143" and len(set(m.values())) == 256


def _reference_bpe(encoder, ranks, token):
    """OpenAI encoder.py's bpe(): merge the lowest-ranked pair everywhere until none is left."""
    word = tuple(token)
    pairs = set(zip(word, word[1:]))
    if not pairs:
        return [token]
    while True:
        bigram = min(pairs, key=lambda p: ranks.get(p, float("inf")))
        if bigram not in ranks:
            break
        first, second = bigram
        new, i = [], 0
        while i < len(word):
            try:
                j = word.index(first, i)
                new.extend(word[i:j])
                i = j
            except ValueError:
                new.extend(word[i:])
                break
            if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                new.append(first + second)
                i += 2
            else:
                new.append(word[i])
                i += 1
        word = tuple(new)
        if len(word) == 1:
            break
        pairs = set(zip(word, word[1:]))
    return list(word)


def test_gpt2_matches_independent_regex_implementation(gpt2):
    regex = pytest.importorskip("regex")
    pat = regex.compile(GPT2_PAT)
    with open(data_file("gpt2-vocab.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    with open(data_file("gpt2-merges.txt"), encoding="utf-8") as f:
        merges = [tuple(x.split()) for x in f.read().split("\n")[1:] if x]
    ranks = dict(zip(merges, range(len(merges))))
    be = bytes_to_unicode()
    for text in CORPUS + _random_corpus():
        pieces = pat.findall(text)
        assert pretokenize(text) == pieces, repr(text)
        ref = [encoder[t] for p in pieces for t in _reference_bpe(encoder, ranks, "".join(be[b] for b in p.encode()))]
        assert gpt2.encode(text) == ref, repr(text)
        assert gpt2.decode(ref) == text


def test_gpt2_matches_tiktoken(gpt2):
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    ranks = data_gym_to_mergeable_bpe_ranks(data_file("gpt2-merges.txt"), data_file("gpt2-vocab.json"))
    enc = tiktoken.Encoding("gpt2-local", pat_str=GPT2_PAT.replace("'s|'t|'re|'ve|'m|'ll|'d", "'(?:[sdmt]|ll|ve|re)"),
                            mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256})
    for text in CORPUS + _random_corpus(3000, seed=1):
        assert gpt2.encode(text) == enc.encode_ordinary(text), repr(text)


def test_gpt2_decode_streams_partial_utf8(gpt2):
    ids = gpt2.encode("😀")
    assert len(ids) > 1
    assert gpt2.decode(ids[:1]).endswith("\ufffd")           # an open UTF-8 sequence is replaced, not raised
    assert gpt2.decode(ids) == "😀"


@pytest.fixture(scope="module")
def sp():
    pytest.importorskip("sentencepiece")
    return SentencePieceTokenizer(data_file("llama2-tokenizer.model"))


@pytest.fixture(scope="module")
def l2c():
    return Llama2cTokenizer(data_file("llama2c-tokenizer.bin"), 32000)


def test_sentencepiece_golden(sp):
    assert sp.vocab_size == 32000 and (sp.bos_id, sp.eos_id) == (1, 2)
    s = "Once upon a time, there was a little girl."
    assert sp.encode(s) == [9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 7826, 29889]
    assert sp.id_to_piece(9038) == "\u2581Once"
    assert sp.decode(sp.encode(s)) == s


def test_llama2c_tokenizer_file_and_golden(l2c):
    assert l2c.max_token_length == 27 and l2c.vocab_size == 32000
    assert l2c.pieces[29871] == b" " and l2c.pieces[9038] == b" Once" and l2c.pieces[3] == b"<0x00>"
    assert float(l2c.scores[9038]) == -8779.0
    s = "Once upon a time, there was a little girl."
    assert l2c.encode(s, bos=True, eos=True) == [1, 9038, 2501, 263, 931, 29892, 727, 471, 263, 2217, 7826, 29889, 2]
    assert l2c.encode("") == [] and l2c.encode("", bos=True) == [1]
    assert l2c.decode([1] + l2c.encode(s)) == s                 # leading space dropped after BOS
    assert l2c.decode(l2c.encode("\u2603 snow")) == " \u2603 snow"   # dummy prefix kept without BOS


def test_llama2c_agrees_with_sentencepiece(sp, l2c):
    """run.c's algorithm (code points, byte fallback, highest-score merges) reproduces SentencePiece BPE
    on this vocabulary; the corpus includes byte-fallback characters, whitespace runs and digits."""
    texts = CORPUS + _random_corpus(400, seed=2) + ["a\r\nb", "\ufb01 ligature", "\uff21 full width", "e\u0301"]
    texts = [t for t in texts if t]
    disagree = [t for t in texts if l2c.encode(t) != sp.encode(t)]
    assert not disagree, f"{len(disagree)} disagreements, e.g. {disagree[:3]!r}"
    for t in texts[:50]:
        assert l2c.decode([1] + l2c.encode(t)) == sp.decode(sp.encode(t))
    # where they differ by design: run.c reads a C string, so text stops at NUL
    assert l2c.encode("x\x00y") == l2c.encode("x") != sp.encode("x\x00y")


def test_tokenizer_bad_files(tmp_path):
    p = tmp_path / "tok.bin"
    with open(data_file("llama2c-tokenizer.bin"), "rb") as f:
        raw = f.read()
    p.write_bytes(raw[:1000])
    with pytest.raises(ModelFormatError) as e:
        Llama2cTokenizer(str(p), 32000)
    assert "truncated" in str(e.value) and "tok.bin" in str(e.value)
    p.write_bytes(raw)
    with pytest.raises(ModelFormatError) as e:
        Llama2cTokenizer(str(p), 512)                    # wrong vocabulary for this file
    assert "trailing bytes" in str(e.value) and "512" in str(e.value)
    p.write_bytes(b"\xff\xff\xff\xff" + raw[4:])
    with pytest.raises(ModelFormatError):
        Llama2cTokenizer(str(p))
    with pytest.raises(ModelFormatError):
        Llama2cTokenizer(str(tmp_path / "missing.bin"))
    bad_model = tmp_path / "tokenizer.model"
    bad_model.write_bytes(b"this is not a protobuf")
    pytest.importorskip("sentencepiece")
    with pytest.raises(ModelFormatError) as e:
        SentencePieceTokenizer(str(bad_model))
    assert "tokenizer.model" in str(e.value)
    (tmp_path / "vocab.json").write_text("[1, 2, 3]")
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    with pytest.raises(ModelFormatError) as e:
        load_tokenizer(str(tmp_path / "vocab.json"))
    assert "vocab.json" in str(e.value)
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0}))
    with pytest.raises(ModelFormatError) as e:
        load_tokenizer(str(tmp_path / "vocab.json"))
    assert "byte symbols" in str(e.value)
    with pytest.raises(ModelFormatError):
        load_tokenizer(str(tmp_path / "nothing-here.model"))


def test_find_tokenizer_checks_vocab_size(tmp_path):
    import shutil

    from models_helpers import tiny_llama
    shutil.copy(data_file("llama2c-tokenizer.bin"), tmp_path / "tokenizer.bin")
    assert find_tokenizer(str(tmp_path / "m.bin"), tiny_llama(vocab_size=32000)).vocab_size == 32000
    assert find_tokenizer(str(tmp_path / "m.bin"), tiny_llama(vocab_size=512)) is None
