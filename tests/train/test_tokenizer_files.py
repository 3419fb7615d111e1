"""A run folder is a model: each checkpoint folder, and the run folder meaning its latest
one, carries config.json + model.safetensors + the tokenizer files, so orion.models.load, orion generate
and orion train --init take it without --tokenizer; --export-hf carries the tokenizer too and is written as
a folder renamed into place. A SentencePiece tokenizer travels as tokenizer.model and as
tokenizer.json, which transformers loads without protobuf and which encodes, decodes and generates as the
SentencePiece model it was written from."""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import orion.models
from orion.cli.train import main
from orion.models import reference
from orion.models.tokenizers import HFTokenizer, find_tokenizer
from orion.train import checkpoint as ck
from orion.train import data as D
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
    args = ["--preset", "micro", "--data", str(d / "text.txt"), "--steps", "2", "--batch", "2", "--sample-tokens", "0",
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
    for fn in ("config.json", "model.safetensors", "tokenizer.model", "tokenizer.json", "tokenizer_config.json",
               "optim.safetensors", "state.json", "manifest.json"):
        assert os.path.isfile(os.path.join(folder, fn)), fn
    with open(os.path.join(folder, "config.json")) as f:
        assert json.load(f)["architectures"] == ["LlamaForCausalLM"]
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        tc = json.load(f)
    # the class transformers 4 and 5 build from tokenizer.json as written (LlamaTokenizer rebuilds its own)
    assert tc["tokenizer_class"] == "PreTrainedTokenizerFast" and tc["bos_token"] == "<s>" and tc["eos_token"] == "</s>"


def test_the_run_folder_tokenizer_json_is_the_trained_tokenizer(run):
    """find_tokenizer prefers tokenizer.json: on every corpus document it gives the ids of the run's
    SentencePiece model and decodes them back the same."""
    folder = ck.resolve(str(run / "run"))
    tok = find_tokenizer(folder, config_from_state(ck.load(folder).state["model"]))
    trained = SentencePieceTokenizer(os.path.join(folder, "tokenizer.model"))
    assert isinstance(tok, HFTokenizer) and tok.bos_id == trained.bos_id and tok.eos_id == trained.eos_id
    docs = D.read_texts(default_corpus())
    assert len(docs) == 520
    for d in docs:
        ids = trained.encode(d)
        assert tok.encode(d) == ids and tok.decode(ids) == trained.decode(ids)
    once = "Once upon a time"
    assert tok.encode(once, add_special_tokens=True) == [trained.bos_id] + trained.encode(once)


def test_generate_on_the_run_folder_gives_the_text_of_the_sentencepiece_model(run, tmp_path):
    """orion generate reads tokenizer.json now, before tokenizer.model (the copy without tokenizer.json):
    the same text, sampled text of the 2-step model included, where <unk> and BOS come up."""
    from orion.cli.generate import add_generate_parser, cmd_generate
    folder = ck.resolve(str(run / "run"))
    before = tmp_path / "spm"
    shutil.copytree(folder, before)
    os.remove(before / "tokenizer.json")
    old = orion.models.load(str(before), device="sim", use_cache=False)
    assert type(old.tokenizer).__name__ == "SentencePieceTokenizer"
    ids = {t for seed in range(6) for t in old.generate("Once upon a time", max_tokens=64, temperature=1.0,
                                                        seed=seed).tokens}
    assert {0, 1} & ids                                   # decoded as SentencePiece does: " ⁇ " and nothing

    def cli(d, *more):
        p = argparse.ArgumentParser()
        add_generate_parser(p.add_subparsers())
        args = p.parse_args(["generate", "--model", str(d), "--prompt", "Once upon a time", "--device", "sim",
                             "--cache-dir", str(tmp_path / "c"), *more])
        out, err = io.StringIO(), io.StringIO()
        assert cmd_generate(args, out=out, err=err) == 0
        return out.getvalue()
    for more in [("--max-tokens", "24")] + [("--temp", "1", "--seed", str(seed)) for seed in range(6)]:
        assert cli(folder, *more) == cli(before, *more)


_NO_PROTOBUF = textwrap.dedent("""
    import json, sys
    sys.modules["google.protobuf"] = sys.modules["tiktoken"] = None    # a venv with only torch + transformers
    import sentencepiece as spm
    from transformers import AutoTokenizer
    folder, corpus = sys.argv[1:3]
    tok = AutoTokenizer.from_pretrained(folder)
    sp = spm.SentencePieceProcessor(model_file=folder + "/tokenizer.model")
    texts = json.load(open(corpus, encoding="utf-8"))
    bad = [t for t in texts if tok.encode(t) != [sp.bos_id()] + sp.encode(t)
           or tok.decode(sp.encode(t)) != sp.decode(sp.encode(t))]
    print(json.dumps({"class": type(tok).__name__, "example": tok.encode("Once upon a time"), "bad": bad[:3],
                      "n": len(texts)}))
""")


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers is not installed")
def test_transformers_loads_the_export_without_protobuf(run, tmp_path):
    """AutoTokenizer on the export, protobuf unimportable: loads tokenizer.json (no conversion) and encodes
    with BOS and decodes as the SentencePiece model on every corpus document and the edge cases."""
    from orion.train.tokenizer_files import sentencepiece_files
    hf = run / "hf"
    with open(hf / "tokenizer.model", "rb") as f:
        assert (hf / "tokenizer.json").read_bytes() == sentencepiece_files(f.read())["tokenizer.json"]
    texts = D.read_texts(default_corpus()) + ["", " ", "  lead", "a   b  ", "line\nnext\n\n x", "\t tab", "12 345",
                                              "héllo wörld ñ", "emoji 😀😀 x", "▁x", "x▁ "]
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    r = subprocess.run([sys.executable, "-c", _NO_PROTOBUF, str(hf), str(tmp_path / "texts.json")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["bad"] == [] and got["n"] == len(texts)
    assert got["class"] == "TokenizersBackend" or got["class"] == "PreTrainedTokenizerFast"


def test_the_export_carries_the_tokenizer(run):
    hf = run / "hf"
    assert {"config.json", "model.safetensors", "tokenizer.model", "tokenizer.json", "tokenizer_config.json"} <= \
        set(os.listdir(hf))
    m = orion.models.load(str(hf), device="sim", use_cache=False)
    assert m.tokenizer is not None and m.tokenizer.vocab_size <= m.config.vocab_size
    assert not [n for n in os.listdir(run) if n.startswith(".hf")]          # no temp or old folder left


def test_init_from_a_run_folder_needs_no_tokenizer_flag(run, tmp_path):
    assert main(["--model", str(run / "run"), "--data", str(run / "text.txt"), "--steps", "1", "--batch", "2",
                 "--sample-tokens", "0", "--no-progress", "--no-ckpt", "--seq-len", "32"]) == 0


def test_an_export_is_replaced_whole_or_not_at_all(run, tmp_path, monkeypatch):
    from orion.native import safetensors as st
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
    assert main(base + ["--model", str(run / "hf"), "--steps", "1"]) == 0
    for _ in range(2):
        assert main(base + ["--resume", str(tmp_path / "r"), "--more-steps", "1"]) == 0
    st = ck.load(str(tmp_path / "r"))
    assert st.step == 3 and st.state["init"] == str(run / "hf")
    assert {"tokenizer.model", "tokenizer.json", "tokenizer_config.json"} <= set(st.files)
