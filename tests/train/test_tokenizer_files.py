"""A run folder is a model (issue 13 §1): each checkpoint folder, and the run folder meaning its latest
one, carries config.json + model.safetensors + the tokenizer files, so orion.models.load, orion generate
and orion train --init take it without --tokenizer; --export-hf carries the tokenizer too and is written as
a folder renamed into place (issue 12 §8)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import orion.models
from orion.cli.train import main
from orion.models import reference
from orion.models.tokenizers import find_tokenizer
from orion.train import checkpoint as ck
from orion.train.data import SentencePieceTokenizer
from orion.train.defaults import default_corpus
from orion.train.errors import TrainError
from orion.train.model import config_from_state, write_hf
from orion.train.tokenizer_files import tokenizer_files


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Two steps of the micro preset on 12 KB of the bundled corpus, exported to HF as well."""
    d = tmp_path_factory.mktemp("run")
    with open(default_corpus(), encoding="utf-8") as f:
        body = f.read(12000)
    (d / "text.txt").write_text(body[:body.rfind("\n")], encoding="utf-8")
    args = ["--model", "micro", "--data", str(d / "text.txt"), "--steps", "2", "--batch", "2", "--sample-tokens", "0",
            "--no-progress", "--ckpt-dir", str(d / "run"), "--export-hf", str(d / "hf")]
    assert main(args) == 0
    return d


def test_the_run_folder_loads_as_its_latest_checkpoint(run):
    m = orion.models.load(str(run / "run"), device="sim", use_cache=False)
    assert m.name == "step-00000002" and m.tokenizer is not None
    state = ck.load(str(run / "run"))
    ids = [1] + m.tokenizer.encode("Once upon a time")
    want = reference.llama_forward(config_from_state(state.state["model"]), state.params, ids)
    assert np.abs(m.logits(ids) - want).max() < 0.05 * np.abs(want).max()


def test_a_checkpoint_folder_has_the_hf_layout_and_the_tokenizer(run):
    folder = ck.resolve(str(run / "run"))
    for fn in ("config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json", "optim.safetensors",
               "state.json", "manifest.json"):
        assert os.path.isfile(os.path.join(folder, fn)), fn
    with open(os.path.join(folder, "config.json")) as f:
        assert json.load(f)["architectures"] == ["LlamaForCausalLM"]
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        tc = json.load(f)
    assert tc["tokenizer_class"] == "LlamaTokenizer" and tc["bos_token"] == "<s>" and tc["eos_token"] == "</s>"
    state = ck.load(folder)
    tok = find_tokenizer(folder, config_from_state(state.state["model"]))
    trained = SentencePieceTokenizer(os.path.join(folder, "tokenizer.model"))
    assert tok is not None and tok.encode("Once upon a time") == trained.encode("Once upon a time")


def test_the_export_carries_the_tokenizer(run):
    hf = run / "hf"
    assert {"config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json"} <= set(os.listdir(hf))
    m = orion.models.load(str(hf), device="sim", use_cache=False)
    assert m.tokenizer is not None and m.tokenizer.vocab_size <= m.config.vocab_size
    assert not [n for n in os.listdir(run) if n.startswith(".hf")]          # no temp or old folder left


def test_init_from_a_run_folder_needs_no_tokenizer_flag(run, tmp_path):
    assert main(["--init", str(run / "run"), "--data", str(run / "text.txt"), "--steps", "1", "--batch", "2",
                 "--sample-tokens", "0", "--no-progress", "--no-ckpt", "--seq-len", "32"]) == 0


def test_an_export_is_replaced_whole_or_not_at_all(run, tmp_path, monkeypatch):
    from orion import safetensors as st
    state = ck.load(str(run / "run"))
    cfg = config_from_state(state.state["model"])
    out = tmp_path / "hf"
    write_hf(str(out), cfg, state.params, tokenizer_files(None, str(run / "hf")))
    before = {n: (out / n).read_bytes() for n in os.listdir(out)}

    def dying(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(st, "write", dying)
    with pytest.raises(OSError):
        write_hf(str(out), cfg, {k: v * 2 for k, v in state.params.items()})
    assert {n: (out / n).read_bytes() for n in os.listdir(out)} == before       # the old export, whole
    assert sorted(os.listdir(tmp_path)) == ["hf"]                                 # no temp folder left
    (out / "notes.txt").write_text("mine")
    monkeypatch.undo()
    with pytest.raises(TrainError, match="other files"):
        write_hf(str(out), cfg, state.params)


def test_a_run_from_an_hf_folder_resumes_again_and_again(run, tmp_path):
    """Its checkpoints carry the --init folder's tokenizer files, and state.json keeps naming that folder."""
    base = ["--data", str(run / "text.txt"), "--batch", "2", "--sample-tokens", "0", "--no-progress", "--seq-len", "32",
            "--ckpt-dir", str(tmp_path / "r")]
    assert main(base + ["--init", str(run / "hf"), "--steps", "1"]) == 0
    for _ in range(2):
        assert main(base + ["--resume", str(tmp_path / "r"), "--more-steps", "1"]) == 0
    st = ck.load(str(tmp_path / "r"))
    assert st.step == 3 and st.state["init"] == str(run / "hf")
    assert {"tokenizer.model", "tokenizer_config.json"} <= set(st.files)
