"""``orion train --init`` on every model family's fixture (tests/fixtures/models): a few steps
lower the loss on the bundled story text (tokenized by the folder's own tokenizer.json), a run resumed
from a checkpoint repeats the uninterrupted run exactly, ``--export-hf`` writes a folder that
``orion.models`` loads back to the trained weights and logits (Gemma's norm offset, Phi-3's fused tensors,
Qwen's biases, the family's config.json), and ``--lora`` trains adapters on each family's frozen base.
Old checkpoints (state.json with dim/hidden_dim/seq_len) still resume."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from orion.cli.train import main
from orion.models import reference
from orion.models.loaders import read_checkpoint
from orion.models.tokenizers import find_tokenizer
from orion.train import checkpoint as ck
from orion.train.data import TokenDataset, encode_documents, read_texts
from orion.train.defaults import default_corpus
from orion.train.model import config_from_state, load_pretrained
from orion.train.trainer import TrainConfig, Trainer

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models")
FAMILIES = sorted(n for n in os.listdir(FIXTURES) if os.path.isfile(os.path.join(FIXTURES, n, "config.json")))
SEQ = 32


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """The first ~24 KB of the bundled story corpus (enough windows, quick to tokenize)."""
    with open(default_corpus(), encoding="utf-8") as f:
        body = f.read(24000)
    p = tmp_path_factory.mktemp("data") / "stories.txt"
    p.write_text(body[:body.rfind("\n")], encoding="utf-8")
    return str(p)


def _args(name, out, text, *extra):
    return ["--model", os.path.join(FIXTURES, name), "--data", text, "--seq-len", str(SEQ), "--batch", "4",
            "--lr", "3e-3", "--warmup", "0", "--eval-batches", "1", "--val-fraction", "0.05", "--sample-tokens", "4",
            "--no-progress", "--ckpt-dir", str(out / "run"), "--log-jsonl", str(out / "log.jsonl"), *extra]


def _losses(path):
    with open(path) as f:
        return [d["loss"] for d in map(json.loads, f) if "loss" in d]          # step records, not val ones


def test_every_fixture_family_is_covered():
    assert {"llama3", "smollm2", "qwen2", "qwen3", "mistral", "gemma3", "phi3"} <= set(FAMILIES)


@pytest.mark.parametrize("name", FAMILIES)
def test_init_train_resume_export(name, text, tmp_path, capsys):
    hf = tmp_path / "hf"
    assert main(_args(name, tmp_path, text, "--steps", "6", "--export-hf", str(hf))) == 0
    out = capsys.readouterr().out
    losses = _losses(tmp_path / "log.jsonl")
    assert len(losses) == 6 and np.mean(losses[-2:]) < np.mean(losses[:2]) - 0.05, losses
    assert "compiles 0 loads 0 during training" in out and "sample (temperature" in out
    # the export: the family's config.json, and the trained weights as orion.models reads them back
    state = ck.load(str(tmp_path / "run"))
    cfg = config_from_state(state.state["model"])
    back = read_checkpoint(str(hf))
    assert back.config == cfg
    with open(hf / "config.json") as f, open(os.path.join(FIXTURES, name, "config.json")) as g:
        assert json.load(f)["model_type"] == json.load(g)["model_type"]
    assert set(back.weights) == set(state.params)
    for k, v in state.params.items():
        np.testing.assert_allclose(back.weights[k], v, rtol=1e-6, atol=1e-7, err_msg=k)
    ids = list(range(3, 3 + 40))
    np.testing.assert_allclose(reference.llama_forward(back.config, back.weights, ids),
                               reference.llama_forward(cfg, state.params, ids), rtol=1e-6, atol=1e-6)
    assert os.path.isfile(hf / "tokenizer.json")
    # the CLI continues the run (tokenizer found again through the --init folder recorded in state.json)
    assert main(_args(name, tmp_path, text, "--steps", "8", "--resume", str(tmp_path / "run"))) == 0
    assert "steps 6->8" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["qwen3", "gemma3", "phi3"])
def test_exported_folder_runs_on_the_device_like_the_trained_weights(name, text, tmp_path, capsys):
    import orion.models
    assert main(_args(name, tmp_path, text, "--steps", "2", "--export-hf", str(tmp_path / "hf"))) == 0
    capsys.readouterr()
    m = orion.models.load(str(tmp_path / "hf"), device="sim", use_cache=False)
    state = ck.load(str(tmp_path / "run"))
    ids = m.encode("Once upon a time there was a little girl who liked to play in the park.")
    want = reference.llama_forward(config_from_state(state.state["model"]), state.params, ids)
    got = m.logits(ids)
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()


@pytest.mark.parametrize("name", FAMILIES)
def test_resume_repeats_the_uninterrupted_run(name, text, tmp_path):
    cfg, params = load_pretrained(os.path.join(FIXTURES, name))
    tok = find_tokenizer(os.path.join(FIXTURES, name), cfg)
    tokens = encode_documents(read_texts(text), tok)

    def trainer(ckpt_dir, resume=None):
        tc = TrainConfig(steps=4, batch=2, seq_len=SEQ, lr=3e-3, warmup=0, seed=3, device="sim", val_fraction=0.0,
                         ckpt_dir=ckpt_dir)
        return Trainer(cfg, tc, {k: v.copy() for k, v in params.items()},
                       TokenDataset(tokens, SEQ, cfg.vocab_size, 0.0, 3), resume=resume)
    full = trainer(None)
    want = full.train().losses
    end = {k: v.copy() for k, v in full.params.items()}
    full.close()
    a = trainer(str(tmp_path / "run"))
    first = a.train(stop_after=2).losses
    a.close()
    b = trainer(str(tmp_path / "run"), resume=ck.load(str(tmp_path / "run")))
    rest = b.train().losses
    np.testing.assert_array_equal(first + rest, want)
    for k in end:
        np.testing.assert_array_equal(b.params[k], end[k], err_msg=k)
    b.close()


@pytest.mark.parametrize("name", FAMILIES)
def test_lora_on_each_family(name, text, tmp_path, capsys):
    """Adapters on every linear (Phi-3: the fused modules' parts share lora_A) lower the float64 loss of the
    merged model on the first windows of the data, and load back as a PEFT folder."""
    from orion import lora as L
    assert main(_args(name, tmp_path, text, "--steps", "6", "--lora", "r=4,alpha=8,targets=all-linear",
                      "--lr", "1e-2")) == 0
    out = capsys.readouterr().out
    assert "base frozen, baked per layer" in out and "compiles 0 loads 0 during training" in out
    cfg, base = load_pretrained(os.path.join(FIXTURES, name))
    ad = L.load(str(tmp_path / "run" / "adapter"), cfg, base)
    assert ad.names and all(np.abs(ad.B[n]).max() > 0 for n in ad.names)
    tokens = encode_documents(read_texts(text), find_tokenizer(os.path.join(FIXTURES, name), cfg))

    def loss(w):
        total = 0.0
        for i in range(4):
            win = np.asarray(tokens[i * SEQ:(i + 1) * SEQ + 1], np.int64)
            z = reference.llama_forward(cfg, w, win[:-1])
            z = z - z.max(axis=1, keepdims=True)
            total += float(np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(SEQ), win[1:]]))
        return total / 4
    assert loss(L.merge(base, ad)) < loss(base) - 0.02


def test_export_bin_of_a_feature_model_is_refused_before_training(text, tmp_path, capsys):
    assert main(_args("gemma3", tmp_path, text, "--steps", "1", "--export-bin", str(tmp_path / "m.bin"))) == 1
    err = capsys.readouterr().err
    assert "llama2.c .bin cannot hold this model" in err and "sliding_window=8" in err and "--export-hf" in err
    assert not os.path.exists(tmp_path / "run") and not os.path.exists(tmp_path / "m.bin")


def test_old_state_json_resumes(tmp_path):
    """A checkpoint written before training used LlamaConfig (model keys dim/hidden_dim/seq_len)."""
    from train_helpers import lively_params, micro_config, token_stream
    cfg = micro_config()
    tc = TrainConfig(steps=3, batch=2, lr=3e-3, warmup=0, seed=1, device="sim", val_fraction=0.0,
                     ckpt_dir=str(tmp_path / "run"))
    t = Trainer(cfg, tc, lively_params(cfg), TokenDataset(token_stream(), cfg.n_ctx, cfg.vocab_size, 0.0, 1))
    t.train(stop_after=2)
    t.close()
    old = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 4, "vocab_size": 96, "hidden_dim": 160,
           "seq_len": 64, "norm_eps": 1e-5, "rope_theta": 10000.0, "tie_embeddings": True, "multiple_of": 32}
    assert config_from_state(old) == cfg
    state = ck.load(str(tmp_path / "run"))
    state.state["model"] = old
    t2 = Trainer(cfg, tc, lively_params(cfg), TokenDataset(token_stream(), cfg.n_ctx, cfg.vocab_size, 0.0, 1),
                 resume=state)
    assert t2.train().step == 3
    t2.close()


def test_residual_scale_is_chosen_once_and_resumed(tmp_path):
    """The trainer takes the stream's scale from orion.models.fp16_safety for the initial weights, records it
    in state.json, and a resumed run keeps the recorded one (its programs must not change mid-run); the loss
    scale starts that much higher (gradients at the stream are that much smaller)."""
    from train_helpers import lively_params, micro_config, token_stream
    cfg = micro_config(seq_len=32, embed_scale=3e6)
    tc = TrainConfig(steps=2, batch=2, lr=1e-3, warmup=0, seed=1, device="sim", val_fraction=0.0,
                     ckpt_dir=str(tmp_path / "run"))
    data = TokenDataset(token_stream(), 32, cfg.vocab_size, 0.0, 1)
    t = Trainer(cfg, tc, lively_params(cfg), data)
    assert t.residual_scale == t.progs.residual_scale < 1 / 16
    assert t.scaler.scale == tc.loss_scale / t.residual_scale
    t.train(stop_after=1)
    t.close()
    state = ck.load(str(tmp_path / "run"))
    assert state.state["residual_scale"] == t.residual_scale
    state.state["residual_scale"] = 2.0 ** -12
    t2 = Trainer(cfg, tc, lively_params(cfg), TokenDataset(token_stream(), 32, cfg.vocab_size, 0.0, 1), resume=state)
    assert t2.progs.residual_scale == 2.0 ** -12
    assert t2.train().stats["boundary_clamps"] == 0
    t2.close()
    plain = Trainer(micro_config(), tc, lively_params(micro_config()), TokenDataset(token_stream(), 64, 96, 0.0, 1))
    assert plain.residual_scale == 1.0 and plain.scaler.scale == tc.loss_scale
    plain.close()
