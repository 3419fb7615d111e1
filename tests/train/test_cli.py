"""``orion train`` end to end (in process): train, checkpoint, resume, export, sample; bad input gives a
clear message and exit status 1 (a bad flag value: 2); the recompile strategy's budget stop exits 75 with a resume hint."""

from __future__ import annotations

import os

import pytest

import orion
from orion.cli.train import EXIT_BUDGET, main

STORIES260K = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "stories260K.bin")
LLAMA_TOK = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data", "llama2-tokenizer.model")
FAST = ["--preset", "micro", "--batch", "2", "--no-progress", "--seq-len", "64", "--warmup", "2"]


def test_train_resume_export_sample(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert main(FAST + ["--steps", "3", "--ckpt-dir", run, "--sample-tokens", "12", "--eval-interval", "2"]) == 0
    out = capsys.readouterr().out
    assert "on sim; strategy dynamic (4 programs, 0 compiles per update)" in out
    assert "val loss" in out and "sample (temperature 0.8):\nOnce upon a time" in out
    assert "compiles 0 loads 0 during training" in out
    assert main(FAST + ["--steps", "5", "--resume", run, "--sample-tokens", "0", "--export-bin",
                        str(tmp_path / "m.bin"), "--export-hf", str(tmp_path / "hf")]) == 0
    out = capsys.readouterr().out
    assert "steps 3->5" in out and "step-00000005" in out
    assert os.path.getsize(tmp_path / "m.bin") > 28 and os.path.exists(tmp_path / "hf" / "model.safetensors")
    # the .bin export carries the run's tokenizer beside it, where orion generate finds it
    assert os.path.exists(tmp_path / "m.tokenizer.model") and "with its tokenizer" in out
    from orion.models import load
    m = load(str(tmp_path / "m.bin"), device="sim")
    assert m.tokenizer is not None and m.generate("Once upon a time", max_tokens=4, temperature=0.0).text


def test_bad_input_exits_1_with_a_message(tmp_path, capsys):
    assert main(FAST + ["--steps", "1", "--data", str(tmp_path / "nope.txt"), "--no-ckpt"]) == 1
    assert "no such file" in capsys.readouterr().err
    (tmp_path / "short.txt").write_text("Just a few words.")
    assert main(FAST + ["--steps", "1", "--data", str(tmp_path / "short.txt"), "--no-ckpt"]) == 1
    assert "too short" in capsys.readouterr().err
    from orion.cli.doctor import allowed_strategies
    if not any(s.startswith("delta") for s in allowed_strategies("sim", announce=False)):
        assert main(FAST + ["--steps", "1", "--strategy", "delta", "--no-ckpt"]) == 1
        assert "orion doctor" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "latest.json").write_text('{"checkpoint": "step-00000001"}')
    assert main(FAST + ["--steps", "2", "--resume", str(tmp_path / "bad")]) == 1
    assert "checkpoint" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists(STORIES260K), reason="shared/data/stories260K.bin not present")
def test_pretrained_init_vocab_checks(tmp_path, capsys):
    # text data needs the model's own tokenizer ...
    assert main(["--model", STORIES260K, "--steps", "1", "--no-ckpt", "--no-progress", "--seq-len", "64"]) == 1
    assert "tokenizer" in capsys.readouterr().err
    # ... and Llama-2's 32,000-piece tokenizer does not fit stories260K's 512-token vocabulary
    if os.path.exists(LLAMA_TOK):
        assert main(["--model", STORIES260K, "--tokenizer", LLAMA_TOK, "--steps", "1", "--no-ckpt", "--no-progress",
                     "--seq-len", "64"]) == 1
        assert "vocabulary" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.exists(STORIES260K), reason="shared/data/stories260K.bin not present")
def test_finetune_a_llama2c_checkpoint_on_pretokenized_data(tmp_path, capsys):
    import numpy as np
    rng = np.random.default_rng(0)
    rng.integers(0, 512, 4000).astype("<u2").tofile(tmp_path / "data.bin")
    before = open(STORIES260K, "rb").read()
    assert main(["--model", STORIES260K, "--data", str(tmp_path / "data.bin"), "--steps", "2", "--batch", "1",
                 "--seq-len", "64", "--no-progress", "--ckpt-dir", str(tmp_path / "ft")]) == 0
    out = capsys.readouterr().out
    assert "5-layer Llama d=64 heads=8/4" in out
    assert open(STORIES260K, "rb").read() == before


def test_recompile_budget_exit_code(tmp_path, capsys):
    used, _ = orion.sim.compile_budget()
    orion.sim.set_compile_budget(used + 8 + 8 + 2)       # micro: 8 programs; one update fits
    try:
        code = main(FAST + ["--steps", "4", "--strategy", "recompile", "--ckpt-dir", str(tmp_path / "r"),
                            "--sample-tokens", "0"])
    finally:
        orion.sim.set_compile_budget(10 ** 9)
    assert code == EXIT_BUDGET
    out = capsys.readouterr().out
    assert "compile budget would run out" in out and "--resume" in out
    assert main(FAST + ["--steps", "4", "--resume", str(tmp_path / "r"), "--sample-tokens", "0"]) == 0
    assert "steps 2->4" in capsys.readouterr().out


def test_restart_on_budget_reexecs_and_finishes(tmp_path):
    """Recompile strategy past the real per-process budget (119): checkpoint, exec a fresh process with
    --resume, finish the run (8 programs per update on the micro model: 8 + 13 x 8 = 112 of 119 compiles,
    so the update after step 14 does not fit)."""
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-m", "orion.cli.train"] + FAST +
                       ["--steps", "16", "--strategy", "recompile", "--ckpt-dir", str(tmp_path / "r"),
                        "--restart-on-budget", "--sample-tokens", "0", "--ckpt-interval", "0"],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "restarting with a fresh compile budget" in r.stdout
    assert "steps 14->16" in r.stdout and "step-00000016" in r.stdout


def test_a_new_run_never_overwrites_another_runs_checkpoints(tmp_path, capsys, monkeypatch):
    run = str(tmp_path / "run")
    assert main(FAST + ["--steps", "1", "--ckpt-dir", run, "--sample-tokens", "0"]) == 0
    assert main(FAST + ["--steps", "1", "--ckpt-dir", run, "--sample-tokens", "0"]) == 1
    assert "already holds a training run" in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)                 # the default folder: a fresh numbered one instead
    assert main(FAST + ["--steps", "1", "--sample-tokens", "0"]) == 0
    assert main(FAST + ["--steps", "1", "--sample-tokens", "0"]) == 0
    assert os.path.exists(tmp_path / "orion-train-run" / "latest.json")
    assert os.path.exists(tmp_path / "orion-train-run-2" / "latest.json")


def test_steps_is_the_total_and_more_steps_continues(tmp_path, capsys):
    """--steps stays the run's total on --resume (fewer than done: exit 2 saying so); --more-steps N adds N."""
    run = str(tmp_path / "run")
    assert main(FAST + ["--steps", "3", "--ckpt-dir", run, "--sample-tokens", "0"]) == 0
    capsys.readouterr()
    assert main(FAST + ["--steps", "2", "--resume", run, "--sample-tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert "already at step 3" in err and "--more-steps" in err
    assert main(FAST + ["--steps", "4", "--more-steps", "1", "--resume", run]) == 2
    assert "exclude each other" in capsys.readouterr().err
    assert main(FAST + ["--more-steps", "2", "--resume", run, "--sample-tokens", "0"]) == 0
    assert "steps 3->5" in capsys.readouterr().out
    assert orion.train.checkpoint.load(run).step == 5
    # --resume on a finished run says so and exits 0, training and writing nothing
    before = sorted(os.listdir(run))
    assert main(FAST + ["--resume", run]) == 0
    out = capsys.readouterr().out
    assert "already at step 5 of 5" in out and "--more-steps" in out and "val loss" not in out
    assert sorted(os.listdir(run)) == before and orion.train.checkpoint.load(run).step == 5


def test_the_run_log_is_in_the_run_folder_and_printed(tmp_path, capsys):
    import json
    run = tmp_path / "run"
    assert main(FAST + ["--steps", "3", "--ckpt-dir", str(run), "--sample-tokens", "0", "--eval-interval", "2"]) == 0
    out = capsys.readouterr().out
    log = run / "train_log.jsonl"
    assert f"training log: {log}" in out.replace(str(os.path.relpath(log)), str(log))
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [r for r in recs if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    for key in ("loss", "lr", "grad_norm", "tokens_per_s", "t_device", "t_cpu", "t_update", "t_optim"):
        assert all(isinstance(r[key], float) for r in steps), key
    assert [r["step"] for r in recs if "val_loss" in r] == [2, 3]


def test_model_is_a_model_to_start_from_and_preset_a_fresh_shape(tmp_path, capsys):
    """--model PATH|ORG/NAME starts from a model (as generate finds it), --preset a fresh shape; the old
    spellings (--model PRESET, --init PATH) still work with a one-line note; mixing them is a bad flag."""
    fx = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "llama3")
    common = ["--steps", "1", "--no-ckpt", "--no-progress", "--sample-tokens", "0", "--batch", "2", "--seq-len", "32"]
    assert main(["--model", fx] + common) == 0
    out, err = capsys.readouterr()
    assert "2-layer Llama" in out and err == ""
    assert main(["--init", fx] + common) == 0
    assert capsys.readouterr().err.strip() == f"orion train: --init is now --model (--model {fx})"
    assert main(["--model", "micro"] + common) == 0
    assert "--preset micro" in capsys.readouterr().err
    assert main(["--preset", "micro", "--model", fx] + common) == 2
    assert "give one of them" in capsys.readouterr().err
    assert main(["--model", str(tmp_path / "nothing")] + common) == 1
    assert "no such model" in capsys.readouterr().err
