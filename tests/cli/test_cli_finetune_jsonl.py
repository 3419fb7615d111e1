"""Fine-tuning as a researcher would: chat-format train/valid/test.jsonl, `orion train --init FIXTURE
--lora --mask-prompt --test`, then `orion generate --model RUN` (base + the run's adapter), `orion fuse` into an
HF folder that orion and transformers load with the same logits."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from orion.cli import main
from orion.models import load

QWEN3 = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "qwen3")
PROMPT = [3, 17, 42, 99, 7]


def _data(folder, n=(24, 6, 4)):
    rng = np.random.default_rng(0)
    os.makedirs(folder, exist_ok=True)
    for split, k in zip(("train", "valid", "test"), n):
        with open(os.path.join(folder, f"{split}.jsonl"), "w") as f:
            for _ in range(k):
                a, b = (int(v) for v in rng.integers(1, 20, 2))
                f.write(json.dumps({"messages": [{"role": "user", "content": f"What is {a} plus {b}?"},
                                                 {"role": "assistant", "content": f"{a + b}."}]}) + "\n")
    return str(folder)


def _cli(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ft")
    data = _data(tmp / "data")
    rc = main(["train", "--model", QWEN3, "--data", data, "--lora", "r=8,alpha=16", "--mask-prompt", "--steps", "6",
               "--test", "--no-progress", "--sample-tokens", "0", "--ckpt-dir", str(tmp / "run"), "--lr", "5e-2"])
    assert rc == 0
    return tmp


def test_train_on_chat_jsonl_with_masked_prompts_and_a_test_split(run, capsys):
    state = json.load(open(os.path.join(run, "run", "step-00000006", "state.json")))
    assert state["mask_prompt"] is True
    assert state["train"]["seq_len"] <= 48          # the window fits the longest example, not 256
    rc = main(["train", "--resume", str(run / "run"), "--more-steps", "2", "--no-progress", "--sample-tokens", "0"])
    assert rc == 0
    state = json.load(open(os.path.join(run, "run", "step-00000008", "state.json")))
    assert state["mask_prompt"] is True             # a resumed run keeps masking


def test_the_cli_reports_test_loss_and_perplexity(tmp_path, capsys):
    data = _data(tmp_path / "d", (8, 2, 2))
    assert main(["train", "--model", QWEN3, "--data", data, "--lora", "r=4", "--steps", "1", "--test", "--no-progress",
                 "--sample-tokens", "0", "--no-ckpt"]) == 0
    out = capsys.readouterr().out
    assert "test loss" in out and "perplexity" in out and "(2 examples)" in out


def test_generate_on_a_lora_run_is_base_plus_its_adapter(run, capsys):
    ids = ["--prompt-ids", " ".join(map(str, PROMPT)), "--max-tokens", "6", "--temp", "0"]
    assert _cli(["generate", "--model", str(run / "run")] + ids) == 0
    got = capsys.readouterr()
    assert "is a LoRA run" in got.err
    assert _cli(["generate", "--model", QWEN3, "--adapter-path", str(run / "run" / "adapter")] + ids) == 0
    assert capsys.readouterr().out == got.out
    assert _cli(["generate", "--model", QWEN3] + ids) == 0
    assert capsys.readouterr().out != got.out                # the adapter changes the model


def test_fuse_writes_a_folder_orion_and_transformers_load_alike(run, capsys):
    out = run / "fused"
    assert main(["fuse", "--adapter-path", str(run / "run"), "--save-path", str(out)]) == 0
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(out))
    m = load(QWEN3)
    m.set_adapter(str(run / "run" / "adapter"))
    want = m.logits(PROMPT)
    fused = load(str(out)).logits(PROMPT)
    assert np.max(np.abs(fused - want)) < 2e-2 * np.max(np.abs(want))     # fp16 W + BA vs W x + B(A x)
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(out), torch_dtype=torch.float32)
    with torch.no_grad():
        ref = hf(torch.tensor([PROMPT])).logits[0].numpy()
    assert np.max(np.abs(fused - ref)) < 2e-2 * np.max(np.abs(ref))
    with torch.no_grad():                            # and the same greedy tokens as orion generate on it
        hf_tokens = hf.generate(torch.tensor([PROMPT]), max_new_tokens=8, min_new_tokens=8, do_sample=False,
                                attention_mask=torch.ones(1, len(PROMPT), dtype=torch.long))[0, len(PROMPT):]
    ours = load(str(out)).generate(PROMPT, max_tokens=8, temperature=0.0, stop_tokens=[]).tokens
    assert ours == hf_tokens.tolist()


@pytest.mark.parametrize("extra,phrase", [(["--mask-prompt"], "--mask-prompt needs JSON Lines data"),
                                          (["--test"], "--test needs JSON Lines data")])
def test_jsonl_only_flags_on_text_data_exit_2(tmp_path, capsys, extra, phrase):
    (tmp_path / "t.txt").write_text("some text " * 200)
    rc = _cli(["train", "--preset", "micro", "--data", str(tmp_path / "t.txt"), "--steps", "1", "--no-ckpt",
               "--no-progress"] + extra)
    assert rc == 2 and phrase in capsys.readouterr().err


def test_test_without_a_test_split_exits_2(tmp_path, capsys):
    data = _data(tmp_path / "d", (8, 2, 0))
    os.remove(os.path.join(data, "test.jsonl"))
    rc = _cli(["train", "--model", QWEN3, "--data", data, "--lora", "r=4", "--steps", "1", "--test", "--no-ckpt",
               "--no-progress"])
    assert rc == 2 and "no test split" in capsys.readouterr().err


def test_chat_data_with_a_template_less_tokenizer_is_a_clear_error(tmp_path, capsys):
    data = _data(tmp_path / "d", (8, 2, 0))
    os.remove(os.path.join(data, "test.jsonl"))
    rc = _cli(["train", "--preset", "micro", "--data", data, "--steps", "1", "--no-ckpt", "--no-progress"])
    assert rc == 1 and "this tokenizer has none" in capsys.readouterr().err


def test_fuse_flags_that_name_nothing_usable_exit_2_and_write_nothing(run, tmp_path, capsys):
    out = tmp_path / "out"
    assert _cli(["fuse", "--adapter-path", str(tmp_path / "none"), "--save-path", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert _cli(["fuse", "--adapter-path", str(run / "run" / "adapter"), "--save-path", str(out)]) == 2
    assert "give its base with --model" in capsys.readouterr().err
    assert not out.exists()


def test_a_vocab_the_jsonl_text_cannot_fill_is_refused_as_with_text_data(tmp_path, capsys):
    """--vocab N sets the model's vocabulary: a tokenizer trained on too little JSONL text is refused, not
    silently shrunk (as with text data)."""
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"text": f"story {i} ends."}) + "\n" for i in range(20)))
    rc = _cli(["train", "--preset", "micro", "--vocab", "5000", "--data", str(path), "--steps", "1", "--no-ckpt",
               "--no-progress", "--sample-tokens", "0"])
    assert rc == 1 and "--vocab 5000" in capsys.readouterr().err
