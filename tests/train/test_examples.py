"""JSON Lines fine-tuning data (orion.train.examples): the three formats, their detection per file,
refusals with the line number, prompt masking (on real chat templates: only the assistant's tokens and
its end-of-turn count), padding windows, and the device's loss and gradients with masked targets
against the float64 reference (np_reference.py, where a target of -1 does not count)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import np_reference as R
from train_helpers import lively_params, micro_config
from orion.models.tokenizers import end_of_turn_ids, find_tokenizer
from orion.models.loaders import load_weights
from orion.train.errors import DataError
from orion.train.examples import (IGNORE, ExampleDataset, detect_format, encode_example, load_examples, read_jsonl,
                                  read_splits)
from orion.train.programs import LayerPrograms
from orion.train.step import StepEngine, zero_grads

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Two plus two?"},
        {"role": "assistant", "content": "Four."}, {"role": "user", "content": "And three?"},
        {"role": "assistant", "content": "Five."}]


def _write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


class ByteTok:
    """A template-less tokenizer: one id per byte + 3, BOS 1, EOS 2."""
    bos_id, eos_id, vocab_size = 1, 2, 259

    def encode(self, text):
        return [b + 3 for b in text.encode()]


def _hf_tok(name):
    path = os.path.join(FIX, name)
    return find_tokenizer(path, load_weights(path).config)


# ------------------------------------------------------------------------------------ formats
@pytest.mark.parametrize("obj,fmt", [({"text": "a"}, "text"), ({"prompt": "a", "completion": "b"}, "completions"),
                                     ({"messages": CHAT}, "chat")])
def test_each_format_is_detected(obj, fmt):
    assert detect_format(obj, "x:1") == fmt


@pytest.mark.parametrize("obj,phrase", [({"prompt": "a"}, "'completion' is missing"),
                                        ({"text": "a", "messages": []}, "several formats"),
                                        ({"input": "a"}, "has ['input']")])
def test_a_bad_example_is_refused_with_its_line(tmp_path, obj, phrase):
    path = _write(tmp_path / "d.jsonl", [{"text": "fine"}, obj])
    with pytest.raises(DataError, match=phrase) as e:
        read_splits(path)
    assert f"{path}, line 2" in str(e.value)


def test_mixed_formats_in_one_file_are_refused_with_the_line(tmp_path):
    path = _write(tmp_path / "d.jsonl", [{"text": "a"}, {"text": "b"}, {"prompt": "p", "completion": "c"}])
    with pytest.raises(DataError, match=r"d\.jsonl, line 3: a completions example in a file of text examples"):
        read_splits(path, val_fraction=0)


@pytest.mark.parametrize("line,phrase", [("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object"),
                                         ("[" * 200 + "]" * 200, "nested too deeply"), (b"\xff\xfe{}", "not UTF-8")])
def test_malformed_lines_name_file_and_line(tmp_path, line, phrase):
    path = tmp_path / "d.jsonl"
    with open(path, "wb") as f:
        f.write(b'{"text": "ok"}\n\n')
        f.write(line if isinstance(line, bytes) else line.encode())
    with pytest.raises(DataError, match=phrase) as e:
        read_jsonl(str(path))
    assert f"{path}, line 3" in str(e.value)


def test_a_folder_in_mlx_lm_layout_gives_its_splits(tmp_path):
    for split, n in (("train", 4), ("valid", 2), ("test", 1)):
        _write(tmp_path / f"{split}.jsonl", [{"text": f"{split} {i}"} for i in range(n)])
    ds = load_examples(str(tmp_path), ByteTok(), seq_len=32, vocab_size=259)
    assert (ds.n_windows, ds.n_val_windows, ds.n_test_windows) == (4, 2, 1)
    (x, y), = list(ds.test_batches(4))
    assert bytes(int(t) - 3 for t in x[0, 1:7]) == b"test 0"


def test_messages_without_a_chat_template_are_refused(tmp_path):
    path = _write(tmp_path / "d.jsonl", [{"messages": CHAT}])
    with pytest.raises(DataError, match="this tokenizer has none"):
        load_examples(path, ByteTok(), 64, 259, val_fraction=0)


# ------------------------------------------------------------------------------------ masking
def test_completions_without_template_mask_the_prompt_only():
    ids, counts = encode_example({"prompt": "ab", "completion": "cd"}, "completions", ByteTok(), True, "x")
    assert ids == [1, 100, 101, 102, 103, 2]
    assert counts == [False, False, False, True, True, True]          # the completion and EOS are targets
    _, counts = encode_example({"prompt": "ab", "completion": "cd"}, "completions", ByteTok(), False, "x")
    assert all(counts)


def test_an_empty_completion_still_teaches_the_end_token():
    ids, counts = encode_example({"prompt": "ab", "completion": ""}, "completions", ByteTok(), True, "x")
    assert [i for i, c in zip(ids, counts) if c] == [2]


def _spans(ids, counts):
    spans, cur = [], []
    for i, c in zip(ids, counts):
        if c:
            cur.append(i)
        elif cur:
            spans, cur = spans + [cur], []
    return spans + ([cur] if cur else [])


@pytest.mark.parametrize("fixture", ["llama3", "qwen3", "qwen2", "phi3", "gemma3", "smollm2", "mistral"])
def test_mask_prompt_keeps_exactly_the_assistant_turns_of_a_real_template(fixture):
    """Every assistant turn (its end-of-turn token included) and nothing else."""
    tok = _hf_tok(fixture)
    chat = CHAT[1:] if fixture == "mistral" else CHAT      # Mistral's system prompt: the test below
    ids, counts = encode_example({"messages": chat}, "chat", tok, True, "x")
    spans = _spans(ids, counts)
    assert len(spans) == 2
    for span, answer in zip(spans, ("Four.", "Five.")):
        text = tok.decode(span)
        assert answer in text and "user" not in text and "Two plus" not in text, text
        assert set(end_of_turn_ids(tok)) & set(span), "the end-of-turn token is a target"
    all_ids, all_counts = encode_example({"messages": chat}, "chat", tok, False, "x")
    assert all_ids == ids and all(all_counts)


def test_a_template_that_moves_the_system_prompt_cannot_mask_and_says_so():
    """Mistral's template writes the system prompt into the conversation's last user turn only when that
    turn is the last message: rendered up to an answer it sits before the question, in the whole
    conversation it is gone - the question's tokens cannot be told from the answer's by rendering."""
    with pytest.raises(DataError, match="cannot find the last assistant turn"):
        encode_example({"messages": CHAT}, "chat", _hf_tok("mistral"), True, "d.jsonl:7")


def test_completions_with_a_chat_template_are_a_user_and_an_assistant_turn():
    tok = _hf_tok("qwen3")
    ids, counts = encode_example({"prompt": "Two plus two?", "completion": "Four."}, "completions", tok, True, "x")
    (span,) = _spans(ids, counts)
    assert "Four." in tok.decode(span) and "<|im_start|>user" in tok.decode(ids)


def test_windows_pad_after_the_example_and_ignore_the_padding():
    ex = [([1, 5, 6, 7], [False, False, True, True]), ([1, 8, 9, 10, 11, 12, 13, 14, 15, 16], [True] * 10)]
    ds = ExampleDataset({"train": ex}, seq_len=6, vocab_size=20, pad_id=2)
    tok, tgt = ds._split["train"]
    assert tok[0].tolist() == [1, 5, 6, 7, 2, 2, 2]
    assert tgt[0].tolist() == [IGNORE, 6, 7, IGNORE, IGNORE, IGNORE]
    assert tok[1].tolist() == [1, 8, 9, 10, 11, 12, 13] and ds.truncated == 1


def test_an_example_with_no_target_in_its_window_is_refused():
    with pytest.raises(DataError, match="no target token"):
        ExampleDataset({"train": [([1, 5, 6], [False, False, False])]}, seq_len=4, vocab_size=20)


def test_batches_are_seeded_and_resume_where_they_stopped():
    ex = [([1, i + 3, i + 4], [True] * 3) for i in range(10)]
    a, b = ExampleDataset({"train": ex}, 4, 20, seed=3), ExampleDataset({"train": ex}, 4, 20, seed=3)
    first = [a.next_batch(3)[0].tolist() for _ in range(5)]
    b.next_batch(3)
    b.skip(3)
    state = b.state()
    c = ExampleDataset({"train": ex}, 4, 20, seed=3)
    c.load_state(state)
    assert [c.next_batch(3)[0].tolist() for _ in range(3)] == first[2:]


# ------------------------------------------------------------------------------------ loss and gradients
def test_masked_loss_and_gradients_match_the_float64_reference():
    cfg = micro_config()
    p = lively_params(cfg)
    rng = np.random.default_rng(0)
    tok = rng.integers(0, cfg.vocab_size, (2, cfg.n_ctx + 1))
    X, Y = tok[:, :-1], tok[:, 1:].copy()
    Y[0, :20] = IGNORE                      # a masked prompt
    Y[1, 40:] = IGNORE                      # padding
    progs = LayerPrograms(cfg, cfg.n_ctx, p, "dynamic", "sim")
    eng = StepEngine(cfg, progs, p)
    g = zero_grads(p)
    n = int((Y != IGNORE).sum())
    res = eng.microbatch(X, Y, g, 256.0 / n)
    assert res.finite and res.n_tokens == n
    ref_loss, ref = R.loss_and_grads(cfg, p, X, Y)
    assert abs(res.loss_sum / n - ref_loss) < 2e-3 * ref_loss
    s, k = eng.loss_only(X, Y)
    assert k == n and abs(s / n - ref_loss) < 2e-3 * ref_loss
    _, unmasked = R.loss_and_grads(cfg, p, X, tok[:, 1:])
    for name in ref:
        nrm = np.linalg.norm(ref[name])
        err = np.linalg.norm(g[name] / 256.0 - ref[name]) / nrm
        assert err < 1.5e-2, f"{name}: relative gradient error {err:.3g}"
        assert np.linalg.norm(unmasked[name] - ref[name]) / nrm > 0.1, f"{name}: the mask does not change it"
    eng.close()
    progs.release()
