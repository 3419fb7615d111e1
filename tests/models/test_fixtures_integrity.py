"""The committed per-family reference fixtures (scripts/make_model_fixtures.py) are complete and consistent.

Loader/tokenizer tests compare against these files; this test pins down that every folder has the files
and shapes they rely on, so a partial regeneration or a lost file fails here with a clear message.
Needs only numpy and json.
"""
import json
import struct
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"
NAMES = ["llama3", "smollm2", "llama_linear", "llama_legacy_keys", "qwen2", "qwen3", "mistral", "gemma3", "phi3",
         "gemma3_legacy_keys"]
FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "reference.npz",
         "tokenizer_cases.json", "chat_cases.json"]


def _safetensors_header(path: Path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n])


OTHER = ["massive"]          # bf16 massive-activation checkpoints (scripts/make_massive_fixtures.py, their own test)


def test_every_fixture_folder_is_listed():
    assert sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) == sorted(NAMES + OTHER)


@pytest.mark.parametrize("name", NAMES)
def test_fixture_files_and_shapes(name):
    folder = FIXTURES / name
    missing = [f for f in FILES if not (folder / f).is_file()]
    assert not missing, f"{folder}: missing {missing}; rerun scripts/make_model_fixtures.py {name}"
    assert sum(p.stat().st_size for p in folder.iterdir()) < 400 * 1024

    config = json.loads((folder / "config.json").read_text())
    vocab = config["vocab_size"]
    header = _safetensors_header(folder / "model.safetensors")
    assert header["model.embed_tokens.weight"]["shape"] == [vocab, config["hidden_size"]]
    want_dtype = "BF16" if name.startswith("gemma3") else "F32"
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {want_dtype}
    assert ("lm_head.weight" in header) == (not config["tie_word_embeddings"])

    ref = np.load(folder / "reference.npz")
    ids, logits, greedy, bf16 = ref["ids"], ref["logits"], ref["greedy"], ref["logits_bf16"]
    step_logits = ref["greedy_logits"]
    assert ids.dtype == np.int64 and greedy.dtype == np.int64
    assert logits.dtype == np.float32 and bf16.dtype == np.float32
    assert 40 <= ids.shape[0] <= 48 and greedy.shape == (16,)
    assert logits.shape == bf16.shape == (ids.shape[0], vocab)
    assert step_logits.dtype == np.float32 and step_logits.shape == (16, vocab)
    assert np.isfinite(logits).all() and np.isfinite(bf16).all()
    tokenizer = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    ntok = 1 + max([*tokenizer["model"]["vocab"].values(), *(t["id"] for t in tokenizer["added_tokens"])])
    assert ntok <= vocab  # qwen2: the head is padded past the tokenizer
    assert ids.max() < ntok and greedy.max() < ntok, "generated ids must be decodable"
    if config.get("sliding_window"):
        assert ids.shape[0] > config["sliding_window"]
    # generate() continued from the same logits: its first token is the last position's argmax
    assert greedy[0] == logits[-1].argmax()
    assert (step_logits.argmax(-1) == greedy).all()
    np.testing.assert_allclose(step_logits[0], logits[-1], rtol=0, atol=1e-4 * np.abs(logits).max())
    # bf16 run of the same weights stays close to fp32: both come from one checkpoint
    assert np.abs(bf16 - logits).max() < 0.1 * np.abs(logits).max()

    cases = json.loads((folder / "tokenizer_cases.json").read_text(encoding="utf-8"))
    assert len(cases) >= 20 and any(c["text"] == "" for c in cases)
    for c in cases:
        assert set(c) == {"text", "ids", "ids_no_special", "decoded"}
        assert all(isinstance(i, int) and 0 <= i < ntok for i in c["ids"] + c["ids_no_special"])
    assert str(ref["prompt"]).strip()

    chats = json.loads((folder / "chat_cases.json").read_text(encoding="utf-8"))
    assert len(chats) == 3
    for c in chats:
        assert set(c) == {"messages", "add_generation_prompt", "rendered", "ids"}
        assert c["rendered"] and c["ids"]
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok_config.get("chat_template")
