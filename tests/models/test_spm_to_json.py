"""A SentencePiece BPE model written as tokenizer.json encodes and decodes through the
`tokenizers` library exactly as `sentencepiece` does: every document of the bundled corpus, whitespace edge
cases (leading, repeated, trailing spaces, newlines, tabs, a literal "▁"), digits, accents and emoji
(unknown: one fused <unk>; byte fallback: bytes) and random strings, for the model `orion train` trains and
for the settings a `--tokenizer x.model` may have (byte fallback, NFKC rules, no dummy prefix, whitespace
kept, user-defined pieces) and Llama 2's. The few proto fields are read without protobuf."""

from __future__ import annotations

import io
import json
import os
import random

import pytest

spm = pytest.importorskip("sentencepiece")
pytest.importorskip("tokenizers")

from tokenizers import Tokenizer  # noqa: E402

from orion.errors import ModelFormatError  # noqa: E402
from orion.models.tokenizers.spm_to_json import spm_settings, spm_tokenizer_json  # noqa: E402
from orion.train import data as D  # noqa: E402
from orion.train.defaults import default_corpus  # noqa: E402

EDGE = ["", " ", "  ", "  lead", "a   b  ", "trail ", "\n", " \n x", "line\nnext\n\n  x", "\t tab", "123 4567 89",
        "héllo wörld ñ", "emoji 😀😀 x", "😀", "▁x", " ▁x", "  ▁x", "a▁b", "x▁ ", "Once upon a time",
        "ＡＢＣ ① ｶ", "x <tag> Tim Timmy<tag>"]


@pytest.fixture(scope="module")
def docs():
    return D.read_texts(default_corpus())


@pytest.fixture(scope="module")
def texts(docs):
    rng = random.Random(0)
    alpha = list("abcdefghij TtOo.,!\n\t▁😀é1")
    return docs + EDGE + ["".join(rng.choice(alpha) for _ in range(rng.randint(0, 30))) for _ in range(1500)]


def _train(docs, **kw) -> bytes:
    buf = io.BytesIO()
    args = dict(sentence_iterator=iter([ln for d in docs for ln in d.splitlines() if ln.strip()]), model_writer=buf,
                vocab_size=512, model_type="bpe", character_coverage=1.0, num_threads=1, unk_id=0, bos_id=1, eos_id=2,
                pad_id=-1, normalization_rule_name="identity", minloglevel=2, hard_vocab_limit=False)
    spm.SentencePieceTrainer.train(**{**args, **kw})
    return buf.getvalue()


VARIANTS = {"orion": None, "byte_fallback": dict(vocab_size=1100, byte_fallback=True),
            "nfkc": dict(normalization_rule_name="nmt_nfkc"), "no_dummy_prefix": dict(add_dummy_prefix=False),
            "whitespace_kept": dict(remove_extra_whitespaces=False, byte_fallback=True, vocab_size=1100),
            "whitespace_kept_no_prefix": dict(remove_extra_whitespaces=False, add_dummy_prefix=False),
            "user_defined": dict(user_defined_symbols=["<tag>", "Tim"])}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def model(request, docs):
    kw = VARIANTS[request.param]
    mb = D.train_sentencepiece(docs, 512).model_bytes if kw is None else _train(docs, **kw)
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(mb)
    return request.param, mb, sp, Tokenizer.from_str(spm_tokenizer_json(mb))


def test_encodes_as_sentencepiece(model, texts):
    name, _, sp, tk = model
    bad = [(t, tk.encode(t, add_special_tokens=False).ids, sp.encode(t)) for t in texts
           if tk.encode(t, add_special_tokens=False).ids != sp.encode(t)]
    assert not bad, f"{name}: {len(bad)} texts encode differently, first {bad[:2]}"


def test_decodes_as_sentencepiece(model, texts):
    """Encoded texts and random ids (control pieces decode to nothing, unknown as " ⁇ "); random byte
    pieces may form invalid UTF-8, which the two replace differently: left out of the random ids."""
    name, _, sp, tk = model
    ids = [sp.encode(t) for t in texts]
    rng = random.Random(1)
    ok = [i for i in range(sp.get_piece_size()) if not sp.is_byte(i)]
    ids += [[rng.choice(ok) for _ in range(rng.randint(0, 12))] for _ in range(1000)]
    bad = [(i, tk.decode(i, skip_special_tokens=False), sp.decode(i)) for i in ids
           if tk.decode(i, skip_special_tokens=False) != sp.decode(i)]
    assert not bad, f"{name}: {len(bad)} id lists decode differently, first {bad[:2]}"


def test_post_processor_adds_bos_and_specials_are_added_tokens(model):
    _, mb, sp, tk = model
    assert tk.encode("Once upon a time").ids == [sp.bos_id()] + sp.encode("Once upon a time")
    assert tk.encode("").ids == [sp.bos_id()]
    added = {t.content: (i, t.special) for i, t in tk.get_added_tokens_decoder().items()}
    assert added == {sp.id_to_piece(i): (i, True) for i in (sp.unk_id(), sp.bos_id(), sp.eos_id())}
    plain = Tokenizer.from_str(spm_tokenizer_json(mb, add_bos=False))
    assert plain.encode("Once upon a time").ids == sp.encode("Once upon a time")


def test_orion_model_ids(docs):
    """The documented example: what transformers' own conversion gives and sentencepiece."""
    mb = D.train_sentencepiece(docs, 512).model_bytes
    tk = Tokenizer.from_str(spm_tokenizer_json(mb))
    assert tk.encode("Once upon a time").ids == [1, 310, 312, 4, 311]


def test_settings_read_without_protobuf(docs):
    """Proto fields absent from the file take their proto2 defaults; set ones are read."""
    s = spm_settings(D.train_sentencepiece(docs, 512).model_bytes)
    assert (s["model_type"], s["byte_fallback"], s["add_dummy_prefix"], s["remove_extra_whitespaces"],
            s["escape_whitespaces"], s["precompiled_charsmap"], s["unk_piece"]) == \
        (2, False, True, True, True, b"", "<unk>")
    assert s["types"][:4] == [2, 3, 3, 1] and len(s["types"]) == 512
    s = spm_settings(_train(docs, add_dummy_prefix=False, remove_extra_whitespaces=False, byte_fallback=True,
                            vocab_size=1100, normalization_rule_name="nmt_nfkc", unk_surface="??"))
    assert (s["byte_fallback"], s["add_dummy_prefix"], s["remove_extra_whitespaces"], s["unk_surface"]) == \
        (True, False, False, "??") and len(s["precompiled_charsmap"]) > 1000 and 6 in s["types"]


def test_models_it_cannot_express_get_no_tokenizer_json(docs):
    assert spm_tokenizer_json(_train(docs, model_type="unigram")) is None
    assert spm_tokenizer_json(_train(docs, treat_whitespace_as_suffix=True)) is None


def test_a_broken_model_is_a_model_format_error(docs):
    mb = D.train_sentencepiece(docs, 512).model_bytes
    with pytest.raises(ModelFormatError, match="not a SentencePiece model"):
        spm_settings(mb[:-3] + b"\xff\xff\xff")


def test_output_is_deterministic_json(docs):
    mb = D.train_sentencepiece(docs, 512).model_bytes
    a, b = spm_tokenizer_json(mb), spm_tokenizer_json(mb)
    assert a == b and json.loads(a)["model"]["type"] == "BPE"


LLAMA2 = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "llama2-tokenizer.model")


def test_llama2_tokenizer_model(texts):
    """Llama 2's own tokenizer.model (byte fallback, whitespace kept, 32,000 pieces), when the shared data has it."""
    if not os.path.isfile(LLAMA2):
        pytest.skip("shared/data/llama2-tokenizer.model not present")
    with open(LLAMA2, "rb") as f:
        mb = f.read()
    sp = spm.SentencePieceProcessor()
    sp.LoadFromSerializedProto(mb)
    tk = Tokenizer.from_str(spm_tokenizer_json(mb))
    assert tk.encode("Once upon a time").ids == [1, 9038, 2501, 263, 931]
    for t in texts + ["def f():\n    return 1\n", "中文字符 日本語"]:
        ids = sp.encode(t)
        assert tk.encode(t, add_special_tokens=False).ids == ids and tk.decode(ids) == sp.decode(ids), repr(t)
