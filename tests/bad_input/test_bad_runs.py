"""Runs that must stay self-contained (issue 28, class 7): a run started with ``--init`` keeps its own copy of
the tokenizer files from its first save; every later save, every resume and every export takes them from the
run, never from the --init folder again. So after that folder is deleted, or its tokenizer replaced by
another model's (one that loads with the model's vocabulary: silently wrong text; one that does not:
unloadable), the run still resumes, its checkpoints still carry the original tokenizer, and they load in
``orion.load`` / ``orion generate``. A resumed run refuses a ``--tokenizer`` other than its own, and a changed
tokenizer file in the run is a CheckpointError; a refusal leaves the files on disk as they were."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import orion.models
from orion.cli import main
from orion.models.tokenizers import HFTokenizer
from orion.train import checkpoint as ck
from orion.train.defaults import default_corpus
from orion.train.errors import CheckpointError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"
TEXT = "Once upon a time there was a little fox who liked the snow."


def _tree(root) -> dict:
    """Every file and folder under ``root`` with its bytes: equal before and after = nothing changed."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = Path(dirpath) / n
            out[str(p.relative_to(root))] = None if p.is_dir() else p.read_bytes()
    return out


def _one_line_error(capsys, *phrases) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("orion: error: ") and "\n" not in err and "Traceback" not in err, err
    for p in phrases:
        assert p in err, (p, err)
    return err


# ==================================================================================== class 7: the run's tokenizer
def _train(*args) -> int:
    return main(["train", "--batch", "1", "--seq-len", "32", "--sample-tokens", "0", "--no-progress",
                 "--eval-interval", "0", *args])


@pytest.fixture()
def init_run(tmp_path):
    """A 1-step run from a copy of the llama3 fixture (its tokenizer: tokenizer.json + config files)."""
    init = tmp_path / "init"
    shutil.copytree(FIXTURES / "llama3", init)
    with open(default_corpus(), encoding="utf-8") as f:
        body = f.read(6000)
    (tmp_path / "text.txt").write_text(body[:body.rfind("\n")], encoding="utf-8")
    assert _train("--init", str(init), "--data", str(tmp_path / "text.txt"), "--steps", "1",
                  "--ckpt-dir", str(tmp_path / "run")) == 0
    return tmp_path


ORIGINAL = {n: (FIXTURES / "llama3" / n).read_bytes() for n in ("tokenizer.json", "tokenizer_config.json")}


def _replace_tokenizer(init: Path, other: str) -> None:
    for n in ORIGINAL:
        (init / n).unlink()
        shutil.copy(FIXTURES / other / n, init / n)


CHANGES = {
    "init deleted": lambda init: shutil.rmtree(init),
    "init tokenizer replaced (same size, other ids)": lambda init: _replace_tokenizer(init, "smollm2"),
    "init tokenizer replaced (too large to load)": lambda init: _replace_tokenizer(init, "mistral"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_resumed_init_run_keeps_its_own_tokenizer(init_run, capsys, change):
    d = init_run
    CHANGES[change](d / "init")
    for step in (2, 3):                                  # resumes, again and again, from the run alone
        assert _train("--resume", str(d / "run"), "--more-steps", "1") == 0, capsys.readouterr().err
        folder = d / "run" / f"step-{step:08d}"
        for n, data in ORIGINAL.items():
            assert (folder / n).read_bytes() == data, f"{n} of step {step} is not the run's tokenizer"
    want = HFTokenizer(str(FIXTURES / "llama3" / "tokenizer.json")).encode(TEXT)
    m = orion.models.load(str(d / "run"), device="sim", use_cache=False)
    assert m.tokenizer.encode(TEXT) == want
    capsys.readouterr()
    assert main(["generate", "--model", str(d / "run"), "--prompt", "Once upon", "--max-tokens", "3",
                 "--device", "sim", "--no-cache"]) == 0
    assert capsys.readouterr().out.strip()


def test_an_init_from_a_run_folder_takes_the_runs_tokenizer_json(init_run):
    """The run's tokenizer is tokenizer.json (from an HF --init): a new run from that run folder finds it
    in its latest step folder (it used to look in the run folder itself and ask for --tokenizer)."""
    d = init_run
    shutil.rmtree(d / "init")
    assert _train("--init", str(d / "run"), "--data", str(d / "text.txt"), "--steps", "1",
                  "--ckpt-dir", str(d / "run2")) == 0
    for n, data in ORIGINAL.items():
        assert (d / "run2" / "step-00000001" / n).read_bytes() == data


def test_a_resumed_run_refuses_another_tokenizer(init_run, capsys):
    d = init_run
    before = _tree(d)
    assert _train("--resume", str(d / "run"), "--more-steps", "1",
                  "--tokenizer", str(FIXTURES / "smollm2" / "tokenizer.json")) == 2
    _one_line_error(capsys, "--tokenizer", "carries its own tokenizer", "drop --tokenizer")
    assert _tree(d) == before


def test_a_changed_tokenizer_file_in_the_run_is_a_checkpoint_error(init_run, capsys):
    d = init_run
    tj = d / "run" / "step-00000001" / "tokenizer.json"
    tj.write_bytes((FIXTURES / "smollm2" / "tokenizer.json").read_bytes())
    before = _tree(d)
    with pytest.raises(CheckpointError, match="tokenizer.json"):
        ck.load(str(d / "run"))
    assert _train("--resume", str(d / "run"), "--more-steps", "1") == 1
    _one_line_error(capsys, "tokenizer.json")
    assert _tree(d) == before
