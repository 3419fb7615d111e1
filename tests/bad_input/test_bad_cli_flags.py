"""Bad flags of ``orion generate`` / ``bench`` / ``info`` / ``plot``: refused before any
model is loaded or any benchmark runs — a value out of the library's range (``--batch`` above the decode
columns, ``--draft-k`` above MAX_DRAFT) or a combination that would be ignored exits 2 at argument-parse
time; a file a flag names that cannot be used (binary --prompts-file, adapter config) exits 1. Each case:
one ``orion: error:`` line, no traceback, the loader (or the benchmark run) never called, nothing on disk
changed."""

from __future__ import annotations

import json
import os

import pytest

import orion.bench
import orion.models
from bad_input_helpers import error_line, run_cli, snapshot
from orion.models.batch import MAX_BATCH
from orion.models.speculative import MAX_DRAFT

LLAMA3 = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")
GEN = ["generate", "--model", LLAMA3, "--device", "sim"]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "prompts.txt").write_text("Once upon a time\n")
    (tmp_path / "binary.txt").write_bytes(b"hello\n\x89PNG\r\n\x1a\n\xff\xfe")
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "text.txt").write_text("hello")
    os.mkdir(tmp_path / "folder")
    ad = tmp_path / "adapter"
    ad.mkdir()
    (ad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4, "lora_alpha": 8,
                                                        "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 8.5}}))
    return tmp_path


@pytest.fixture(autouse=True)
def _nothing_loads_or_runs(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("a bad flag must be refused before this is called")
    monkeypatch.setattr(orion.models, "load", refuse)
    monkeypatch.setattr(orion.bench, "run", refuse)






# (argv with {d} for the fixture folder, exit status, words the error line must contain)
CASES = [
    # ranges the library defines (MAX_BATCH decode columns, MAX_DRAFT drafts per eval), checked by argparse
    (GEN + ["--prompts-file", "{d}/prompts.txt", "--batch", str(MAX_BATCH + 1)], 2,
     ["--batch", f"[1, {MAX_BATCH}]", str(MAX_BATCH + 1)]),
    (GEN + ["--prompts-file", "{d}/prompts.txt", "--batch", "0"], 2, ["--batch", f"[1, {MAX_BATCH}]"]),
    (GEN + ["--draft", LLAMA3, "--draft-k", str(MAX_DRAFT + 1)], 2, ["--draft-k", f"[1, {MAX_DRAFT}]"]),
    (GEN + ["--draft", LLAMA3, "--draft-k", "0"], 2, ["--draft-k", f"[1, {MAX_DRAFT}]"]),
    (GEN + ["--draft", LLAMA3, "--draft-k", "two"], 2, ["--draft-k", "integer", "'two'"]),
    (GEN + ["--seed", "-1"], 2, ["--seed", ">= 0"]),
    (GEN + ["--seed", "1.5"], 2, ["--seed", "integer"]),
    # flags that would be ignored, or contradict each other
    (GEN + ["--batch", "4"], 2, ["--batch is only used with --prompts-file"]),
    (GEN + ["--draft-k", "4"], 2, ["--draft-k is only used with --draft"]),
    (GEN + ["--prompt", "hi", "--prompt-ids", "1 2"], 2, ["--prompt", "--prompt-ids", "not both"]),
    (GEN + ["--prompts-file", "{d}/prompts.txt", "--prompt", "hi"], 2, ["--prompts-file holds the prompts"]),
    (GEN + ["--prompts-file", "{d}/prompts.txt", "--chat"], 2, ["--chat", "--prompts-file"]),
    (GEN + ["--prompts-file", "{d}/prompts.txt", "--speculative", "prompt-lookup"], 2,
     ["--prompts-file", "without speculative decoding"]),
    (GEN + ["--draft", LLAMA3, "--speculative", "prompt-lookup"], 2, ["two kinds of drafts"]),
    (GEN + ["--chat", "--prompt", "hi", "--speculative", "prompt-lookup"], 2, ["--chat", "--speculative"]),
    (GEN + ["--no-cache", "--cache-dir", "{d}/cache"], 2, ["--cache-dir is not used with --no-cache"]),
    (GEN + ["--cache-dir", "{d}/text.txt"], 2, ["--cache-dir", "is a file"]),
    # files the flags name, read before the model is
    (GEN + ["--prompts-file", "{d}/binary.txt"], 1, ["--prompts-file", "binary.txt", "not UTF-8", "byte 0x89",
                                                     "byte offset 6"]),
    (GEN + ["--prompts-file", "{d}/missing.txt"], 1, ["--prompts-file", "missing.txt", "cannot read"]),
    (GEN + ["--prompts-file", "{d}/folder"], 1, ["--prompts-file", "folder", "cannot read"]),
    (GEN + ["--prompts-file", "{d}/blank.txt"], 1, ["blank.txt", "holds no prompt"]),
    (GEN + ["--prompt-ids", "1 -5"], 1, ["--prompt-ids", ">= 0", "-5"]),
    (GEN + ["--prompt-ids", "1 x"], 1, ["--prompt-ids", "integers"]),
    (GEN + ["--tokenizer", "{d}/no-tokenizer.json"], 1, ["--tokenizer", "no-tokenizer.json", "no such file"]),
    (GEN + ["--adapter-path", "{d}/folder"], 1, ["folder", "adapter_config.json", "missing"]),
    (GEN + ["--adapter-path", "{d}/adapter"], 1, ["adapter_config.json", "rank_pattern['q_proj']", "8.5"]),
    # orion bench: --noise is a fraction, checked by argparse
    (["bench", "--noise", "1.5"], 2, ["--noise", "[0, 1)"]),
    (["bench", "--noise", "-0.1"], 2, ["--noise", "[0, 1)"]),
    (["bench", "--noise", "nan"], 2, ["--noise", "finite"]),
    (["bench", "--only", ","], 2, ["--only", "comma-separated"]),
    # orion info / plot
    (["info", "--quantize", "int8"], 2, ["--quantize int8 is only used with --model"]),
    (["plot", "{d}", "-o", "{d}/folder"], 2, ["--output", "is a folder"]),
]


def _id(argv) -> str:
    return " ".join(argv[:1] + [a.replace(LLAMA3, "MODEL") for a in argv[len(GEN) if argv[0] == "generate" else 1:]])


@pytest.mark.parametrize("argv,code,needles", CASES, ids=[_id(c[0]) for c in CASES])
def test_bad_flag_is_refused_before_any_work(files, capsys, argv, code, needles):
    argv = [a.replace("{d}", str(files)) for a in argv]
    before = snapshot(files)
    assert run_cli(argv) == code
    line = error_line(capsys.readouterr().err)
    for word in needles:
        assert word.replace("{d}", str(files)) in line, (word, line)
    assert snapshot(files) == before


def test_the_limits_are_the_librarys():
    """--batch and --draft-k take their bounds from where the programs define them (one decode eval's
    columns), so the parser accepts exactly the values the library does."""
    from orion.cli import build_parser
    from orion.models.speculative import DECODE_S
    args = build_parser().parse_args(GEN + ["--prompts-file", "p", "--batch", str(MAX_BATCH)])
    assert args.batch == MAX_BATCH == DECODE_S
    args = build_parser().parse_args(GEN + ["--draft", "d", "--draft-k", str(MAX_DRAFT)])
    assert args.draft_k == MAX_DRAFT == DECODE_S - 1
