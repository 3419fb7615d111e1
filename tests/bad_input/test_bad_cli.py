"""Bad command lines for every ``orion`` command: each ends in ``orion: error: <message>`` on
stderr naming the problem, exit 2 for a bad flag (refused before any work) or 1 for a bad file, never a
traceback, a silent default or a run that starts anyway."""

from __future__ import annotations

import os

import numpy as np
import pytest

from bad_input_helpers import error_line, run_cli
from orion.native.blob import write_blob_file
from orion.cli.demo import demo_mil

LLAMA3 = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")
MICRO = ["train", "--preset", "micro", "--no-progress", "--steps", "1", "--sample-tokens", "0"]


@pytest.fixture
def files(tmp_path):
    """A folder with a MIL program whose weight file is absent, a text file, an .npy of the wrong shape."""
    _, offs = write_blob_file([np.ones((1, 8, 1, 1), np.float16), np.zeros((32, 8, 1, 1), np.float16)])
    (tmp_path / "prog.mil").write_text(demo_mil(8, 4, 32).replace("OFFSET_W", str(offs[1])))
    (tmp_path / "two.mil").write_text(demo_mil(8, 4, 32).replace("OFFSET_W", str(offs[1])).replace(
        "    } -> (y);\n}", "    } -> (y);\n    func main<ios18>(tensor<fp16, [1, 8, 1, 4]> x) {\n    } -> (x);\n}"))
    (tmp_path / "bad.mil").write_text("program(1.3)\n{ nonsense }\n")
    (tmp_path / "text.txt").write_text("hello")
    (tmp_path / "empty.txt").write_text("")
    np.save(tmp_path / "wrong.npy", np.zeros((2, 2), np.float32))
    os.mkdir(tmp_path / "folder")
    return tmp_path




# (argv with {d} for the fixture folder, exit status, words the message must contain)
CASES = [
    # orion run
    (["run", "{d}"], 2, ["is a folder", ".mil"]),
    (["run", "{d}/nope.mil"], 2, ["nope.mil", "no such file"]),
    (["run", "{d}/bad.mil"], 1, ["MIL syntax error"]),
    (["run", "{d}/two.mil", "--random-weights"], 1, ["second function named 'main'"]),
    (["run", "{d}/prog.mil"], 1, ["weight file", "demo.bin", "--random-weights"]),
    (["run", "{d}/prog.mil", "--random-weights", "--input", "x"], 2, ["--input 'x'", "NAME=FILE.npy"]),
    (["run", "{d}/prog.mil", "--random-weights", "--input", "x={d}/text.txt"], 1, ["text.txt", "not a .npy file"]),
    (["run", "{d}/prog.mil", "--random-weights", "--input", "x={d}/missing.npy"], 1, ["missing.npy", "no such file"]),
    (["run", "{d}/prog.mil", "--random-weights", "--input", "x={d}/wrong.npy"], 1, ["wrong.npy", "shape [2, 2]"]),
    (["run", "{d}/prog.mil", "--random-weights", "--input", "q={d}/wrong.npy"], 2, ["'q'", "not inputs"]),
    (["run", "{d}/prog.mil", "--random-weights", "--input", "x={d}/a.npy", "--input", "x={d}/b.npy"], 2,
     ["given twice"]),
    (["run", "{d}/prog.mil", "--repeat", "0"], 2, ["--repeat", ">= 1"]),
    (["run", "{d}/prog.mil", "--weights", "{d}/text.txt"], 2, ["--weights", "not a folder"]),
    (["run", "{d}/prog.mil", "--random-weights", "--out", "{d}/folder"], 2, ["--out", "is a folder"]),
    # orion demo
    (["demo", "--dim", "-4"], 2, ["--dim", ">= 1", "-4"]),
    (["demo", "--seq", "0"], 2, ["--seq", ">= 1"]),
    (["demo", "--dim", "abc"], 2, ["--dim", "integer", "'abc'"]),
    (["demo", "--chip", "m9"], 2, ["--chip", "'m9'"]),
    # orion train: flags refused before any data is read
    (MICRO + ["--heads", "0"], 2, ["--heads", ">= 1"]),
    (MICRO + ["--lr", "nan"], 2, ["--lr", "finite"]),
    (MICRO + ["--lr", "inf"], 2, ["--lr", "finite"]),
    (MICRO + ["--lr", "-1"], 2, ["--lr", "(0, inf)"]),
    (MICRO + ["--ckpt-interval", "-1"], 2, ["--ckpt-interval", ">= 0"]),
    (MICRO + ["--val-fraction", "-0.5"], 2, ["--val-fraction", "[0, 1)"]),
    (MICRO + ["--val-fraction", "1"], 2, ["--val-fraction", "[0, 1)"]),
    (MICRO + ["--batch", "0"], 2, ["--batch", ">= 1"]),
    (MICRO + ["--warmup", "-3"], 2, ["--warmup", ">= 0"]),
    (MICRO + ["--temperature", "-1"], 2, ["--temperature", "[0, inf)"]),
    (MICRO + ["--ckpt-dir", "{d}/text.txt"], 2, ["--ckpt-dir", "is a file"]),
    (MICRO + ["--ckpt-dir", "{d}/text.txt/run"], 2, ["--ckpt-dir", "text.txt is a file"]),
    (MICRO + ["--no-ckpt", "--export-hf", "{d}/text.txt"], 2, ["--export-hf", "is a file"]),
    (MICRO + ["--no-ckpt", "--export-bin", "{d}/folder"], 2, ["--export-bin", "is a folder"]),
    (MICRO + ["--no-ckpt", "--log-jsonl", "{d}/folder"], 2, ["--log-jsonl", "is a folder"]),
    (MICRO + ["--resume", "{d}/text.txt"], 2, ["--resume", "is a file"]),
    (MICRO + ["--no-ckpt", "--seq-len", "100000"], 2, ["GiB", "--seq-len"]),
    (MICRO + ["--no-ckpt", "--dim", "1000000"], 2, ["GiB", "--dim"]),
    (MICRO + ["--no-ckpt", "--layers", "100000"], 2, ["GiB", "--layers 100000"]),
    (MICRO + ["--no-ckpt", "--vocab", "100000000"], 2, ["GiB", "--vocab 100000000"]),
    (MICRO + ["--no-ckpt", "--vocab", "3000", "--data", "{d}/text.txt"], 1, ["--vocab 3000", "pieces"]),
    (MICRO + ["--no-ckpt", "--data", "{d}/missing.txt"], 1, ["missing.txt"]),
    (["train", "--no-progress", "--steps", "1", "--no-ckpt", "--model", "{d}/missing-model"], 1, ["missing-model"]),
    # orion generate
    (["generate", "--model", LLAMA3, "--max-tokens", "-1"], 2, ["--max-tokens", ">= 0"]),
    (["generate", "--model", LLAMA3, "--temp", "-1"], 2, ["--temp", "[0, inf)"]),
    (["generate", "--model", LLAMA3, "--top-p", "0"], 2, ["--top-p", "(0, 1]"]),
    (["generate", "--model", LLAMA3, "--top-p", "1.5"], 2, ["--top-p", "(0, 1]"]),
    (["generate", "--model", LLAMA3, "--top-k", "-1"], 2, ["--top-k", ">= 0"]),
    (["generate", "--model", LLAMA3, "--repetition-penalty", "0"], 2, ["--repetition-penalty"]),
    (["generate", "--model", "{d}/no-such-model", "--device", "sim", "--no-cache"], 1, ["no-such-model"]),
    (["generate", "--model", LLAMA3, "--device", "sim", "--no-cache", "--prompt-ids", "a b"], 1,
     ["--prompt-ids", "integers"]),
    (["generate", "--model", LLAMA3, "--device", "sim", "--no-cache", "--chat", "--prompt-ids", "1"], 1,
     ["--chat", "--prompt-ids"]),
    (["generate", "--model", LLAMA3, "--device", "sim", "--no-cache", "--adapter-path", "{d}/folder"], 1,
     ["adapter_config.json"]),
    (["generate"], 2, ["--model"]),
    # W8A8 flags (orion generate / orion quality --activations int8)
    (["generate", "--model", LLAMA3, "--activations", "int8"], 2, ["--activations int8", "needs --quantize int8"]),
    (["generate", "--model", LLAMA3, "--quantize", "int8", "--activations", "fp8"], 2, ["--activations",
                                                                                       "invalid choice"]),
    (["generate", "--model", LLAMA3, "--quantize", "int8", "--calibration", "{d}/text.txt"], 2,
     ["--calibration is only used with --activations int8"]),
    (["generate", "--model", LLAMA3, "--device", "sim", "--no-cache", "--quantize", "int8", "--activations", "int8"],
     1, ["activation_scales.json", "no activation scales", "calibrate"]),
    (["generate", "--model", LLAMA3, "--device", "sim", "--no-cache", "--quantize", "int8", "--activations", "int8",
      "--calibration", "{d}/empty.txt"], 1, ["calibration text is empty"]),
    (["quality", "--model", LLAMA3, "--quantize", "lut4", "--activations", "int8"], 2, ["needs --quantize int8",
                                                                                       "--quantize lut4"]),
    (["quality", "--model", LLAMA3, "--quantize", "int8", "--calibration-method", "max"], 2,
     ["--calibration-method is only used with --activations int8"]),
    (["quality", "--model", LLAMA3, "--device", "sim", "--quantize", "int8", "--activations", "int8",
      "--calibration", "{d}/missing.txt"], 1, ["--calibration", "missing.txt", "cannot read"]),
    (["quality", "--model", LLAMA3, "--device", "sim", "--quantize", "int8", "--activations", "int8",
      "--data", "{d}/text.txt"], 1, ["text.txt", "no text left after the evaluated tokens", "--calibration FILE"]),
    # the other commands
    (["doctor", "--device", "gpu"], 2, ["--device", "'gpu'"]),
    (["constraints", "--chip", "m9"], 2, ["--chip", "'m9'"]),
    (["info", "extra"], 2, ["unrecognized arguments: extra"]),
    (["plot", "{d}/folder"], 1, ["folder", "no training log"]),
    (["bench", "--only", "nope"], 2, ["--only", "'nope'"]),
    (["bench", "--json", "{d}/folder", "--only", "gemm", "--quick"], 2, ["--json", "is a folder"]),
    (["frobnicate"], 2, ["invalid choice: 'frobnicate'"]),
]


@pytest.mark.parametrize("argv,code,needles", CASES, ids=[" ".join(c[0][:1] + c[0][-2:]) for c in CASES])
def test_bad_command_line(files, capsys, argv, code, needles):
    argv = [a.replace("{d}", str(files)) for a in argv]
    assert run_cli(argv) == code
    line = error_line(capsys.readouterr().err)
    for word in needles:
        assert word.replace("{d}", str(files)) in line, (word, line)


def test_a_refused_train_run_writes_nothing(files, capsys):
    """Output paths are checked before training: nothing is created when --export-hf is a file."""
    before = sorted(os.listdir(files))
    assert run_cli(MICRO + ["--ckpt-dir", str(files / "run"), "--export-hf", str(files / "text.txt")]) == 2
    assert sorted(os.listdir(files)) == before
