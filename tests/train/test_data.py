"""Data: deterministic seeded batching with a resumable position, train/val split, tokenizers, and
typed errors for missing/short data and vocabulary mismatches."""

from __future__ import annotations

import numpy as np
import pytest

from train_helpers import token_stream
from orion.train import data as D
from orion.train.defaults import default_corpus
from orion.train.errors import DataError, VocabMismatch


def test_batches_are_deterministic_and_resumable():
    tokens = token_stream()
    a = D.TokenDataset(tokens, 32, 96, 0.1, seed=5)
    b = D.TokenDataset(tokens, 32, 96, 0.1, seed=5)
    seq_a = [a.next_batch(3) for _ in range(100)]          # crosses several epochs
    assert a.pos.epoch >= 1
    for x, y in zip(seq_a, (b.next_batch(3) for _ in range(100))):
        np.testing.assert_array_equal(x, y)
    c = D.TokenDataset(tokens, 32, 96, 0.1, seed=5)
    for _ in range(40):
        c.next_batch(3)
    d = D.TokenDataset(tokens, 32, 96, 0.1, seed=5)
    d.load_state(c.state())
    for x in seq_a[40:]:
        np.testing.assert_array_equal(d.next_batch(3), x)
    other = D.TokenDataset(tokens, 32, 96, 0.1, seed=6)
    assert not np.array_equal(other.next_batch(3), seq_a[0])
    # windows: input/target shifted by one, taken from the training part only
    w = seq_a[0][0]
    start = int(np.flatnonzero(np.all(np.lib.stride_tricks.sliding_window_view(a.train, 33) == w, axis=1))[0])
    assert start % 32 == 0 and start + 33 <= len(a.train)


def test_validation_split():
    tokens = token_stream()
    ds = D.TokenDataset(tokens, 32, 96, 0.1, seed=0)
    assert len(ds.train) + len(ds.val) == len(tokens) and len(ds.val) == int(len(tokens) * 0.1)
    vb = list(ds.val_batches(4))
    assert sum(len(b) for b in vb) == ds.n_val_windows > 0
    assert all(b.shape[1] == 33 for b in vb)
    np.testing.assert_array_equal(list(ds.val_batches(4))[0], vb[0])


def test_bad_data_is_a_typed_error(tmp_path):
    tokens = token_stream()
    with pytest.raises(DataError, match="no such"):
        D.read_texts(str(tmp_path / "nope.txt"))
    with pytest.raises(DataError, match="no such"):
        D.read_token_bin(str(tmp_path / "nope.bin"))
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    with pytest.raises(DataError, match="whole number"):
        D.read_token_bin(str(tmp_path / "odd.bin"))
    (tmp_path / "empty.txt").write_text("\n\n  \n")
    with pytest.raises(DataError, match="empty"):
        D.read_texts(str(tmp_path / "empty.txt"))
    with pytest.raises(DataError, match="too short"):
        D.TokenDataset(tokens[:20], 32, 96)
    with pytest.raises(VocabMismatch, match="vocabulary of 50"):
        D.TokenDataset(tokens, 32, 50)
    assert issubclass(DataError, ValueError)


def test_pretokenized_bin_roundtrip(tmp_path):
    tokens = token_stream()
    path = tmp_path / "data.bin"
    tokens.astype("<u2").tofile(path)
    got = D.read_token_bin(str(path))
    np.testing.assert_array_equal(got, tokens)


def test_sentencepiece_on_the_fly_is_deterministic():
    docs = D.read_texts(default_corpus())[:60]
    t1 = D.train_sentencepiece(docs, 300)
    t2 = D.train_sentencepiece(docs, 300)
    assert t1.model_bytes == t2.model_bytes and t1.vocab_size == 300
    ids = D.encode_documents(docs[:2], t1)
    assert ids[0] == t1.bos_id and ids.max() < 300
    assert t1.decode(t1.encode("Once upon a time")) == "Once upon a time"
    re = D.SentencePieceTokenizer(t1.model_bytes)
    assert re.fingerprint == t1.fingerprint


def test_llama2_tokenizer_model_if_available():
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "llama2-tokenizer.model")
    if not os.path.exists(path):
        pytest.skip("shared/data/llama2-tokenizer.model not present")
    tok = D.load_tokenizer(path)
    assert tok.vocab_size == 32000
    assert tok.encode("Once upon a time, there was a little girl.") == [9038, 2501, 263, 931, 29892, 727, 471, 263,
                                                                        2217, 7826, 29889]
