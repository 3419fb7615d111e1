"""Runs that must stay self-contained, and messages that must not mislead.

Self-contained: a run started with ``--init`` keeps its own copy of the tokenizer files from its first save; every
later save, every resume and every export takes them from the run, never from the --init folder again. So
after that folder is deleted, or its tokenizer replaced by another model's (one that loads with the model's
vocabulary: silently wrong text; one that does not: unloadable), the run still resumes, its checkpoints
still carry the original tokenizer, and they load in ``orion.load`` / ``orion generate``. A resumed run
refuses a ``--tokenizer`` other than its own, and a changed tokenizer file in the run is a CheckpointError.
Every refusal leaves the files on disk as they were.

Not misleading: a Hub id with a non-ASCII character is "not a valid Hub id" (never blamed on the cache); an
activation scale fp16 cannot hold says so and gives the nearest valid value; an unknown or wrongly typed key
of a checkpoint's ``state.json`` model section is a CheckpointError naming the file and the key (never
LlamaConfig's TypeError); loader errors name tensors as the checkpoint does (``lm_head.weight``,
``model.layers.0.mlp.down_proj.weight``), never orion's internal names (``wcls``, ``layers.0.w2``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import orion.models
from orion.cli import main
from orion.errors import InputError, ModelFormatError
from orion.models.loaders import load_weights, read_checkpoint
from orion.models.tokenizers import HFTokenizer
from orion.quant.activations import SCALES_FILE, ActivationScales
from orion.native.safetensors import SafetensorsFile, write_safetensors
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


# ============================================================================= self-contained: the run's tokenizer
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
    assert _train("--model", str(init), "--data", str(tmp_path / "text.txt"), "--steps", "1",
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
    assert _train("--model", str(d / "run"), "--data", str(d / "text.txt"), "--steps", "1",
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


# ============================================================================= not misleading: Hub ids
@pytest.fixture()
def offline_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)
    return cache


HUB_IDS = [
    ("Qwen/Qwén3-0.6B", "'é' (U+00E9 LATIN SMALL LETTER E WITH ACUTE) at position 8"),
    ("Qwen/Qwen3-0.6B\u200b", "U+200B ZERO WIDTH SPACE"),
    ("Qwen/Qwen３-0.6B", "U+FF13 FULLWIDTH DIGIT THREE"),
    ("Ｑwen/Qwen3-0.6B", "U+FF31 FULLWIDTH LATIN CAPITAL LETTER Q) at position 1"),
    ("Qwen/Qwen3–0.6B", "U+2013 EN DASH"),
]


@pytest.mark.parametrize("repo_id, why", HUB_IDS,
                         ids=["e-acute", "zero-width-space", "fullwidth-3", "fullwidth-Q", "en-dash"])
def test_a_non_ascii_hub_id_is_not_blamed_on_the_cache(offline_cache, repo_id, why):
    with pytest.raises(ModelFormatError) as e:
        orion.models.load(repo_id, device="sim")
    msg = str(e.value)
    assert "not a valid Hugging Face Hub id" in msg and why in msg and "is not ASCII" in msg, msg
    assert "cache" not in msg, msg
    assert _tree(offline_cache) == {}


def test_orion_generate_with_a_non_ascii_hub_id(offline_cache, capsys):
    assert main(["generate", "--model", "Qwen/Qwén3-0.6B", "--prompt", "hi", "--device", "sim"]) == 1
    _one_line_error(capsys, "not a valid Hugging Face Hub id", "U+00E9")
    assert _tree(offline_cache) == {}


# ============================================================================= not misleading: fp16 scales
SCALES = [
    (0.1, ["exactly representable in fp16", "0.1 is not", "the nearest fp16 value is 0.0999755859375", "0.125"]),
    (1e6, ["exactly representable in fp16", "the largest fp16 value is 65504"]),
    (1e-9, ["exactly representable in fp16", "the smallest positive fp16 value is 2**-24"]),
    (-0.5, ["a scale must be a positive finite number, got -0.5"]),
]


@pytest.mark.parametrize("value, phrases", SCALES, ids=[repr(v) for v, _ in SCALES])
def test_an_activation_scale_fp16_cannot_hold_says_what_would(value, phrases):
    with pytest.raises(InputError) as e:
        ActivationScales({"layers.0.wq": value})
    msg = str(e.value)
    assert "positive finite fp16" not in msg
    for p in phrases:
        assert p in msg, (p, msg)


def test_a_scales_file_with_0_1_names_the_file_and_the_nearest_value(tmp_path):
    p = tmp_path / SCALES_FILE
    obj = {"format": "orion.activation_scales", "version": 1, "dtype": "int8", "method": "max", "percentile": None,
           "calibration_tokens": 8, "scales": {"layers.0.wq": 0.5, "layers.0.wk": 0.1}}
    p.write_text(json.dumps(obj))
    before = _tree(tmp_path)
    with pytest.raises(ModelFormatError) as e:
        ActivationScales.load(str(p))
    assert str(p) in str(e.value) and "'layers.0.wk'" in str(e.value) and "0.0999755859375" in str(e.value)
    assert _tree(tmp_path) == before


# ============================================================================= not misleading: state.json keys
@pytest.fixture(scope="module")
def micro_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("micro") / "run"
    assert main(["train", "--preset", "micro", "--batch", "2", "--seq-len", "64", "--warmup", "2", "--steps", "1",
                 "--sample-tokens", "0", "--no-progress", "--ckpt-dir", str(run)]) == 0
    return run


def _edit_state(run: Path, edit) -> Path:
    """Edits the latest state.json and re-signs it in the manifest (a valid checkpoint but for the edit)."""
    folder = Path(ck.resolve(str(run)))
    state = json.loads((folder / "state.json").read_text())
    edit(state["model"])
    body = json.dumps(state).encode()
    (folder / "state.json").write_bytes(body)
    man = json.loads((folder / "manifest.json").read_text())
    man["files"]["state.json"] = {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    (folder / "manifest.json").write_text(json.dumps(man))
    return folder


STATE_EDITS = [
    ("unknown key", lambda m: m.update(attention_sinks=4), ["'model.attention_sinks'", "not a LlamaConfig setting",
                                                           "known keys"]),
    ("renamed key", lambda m: m.update(dim=m.pop("d_model")), ["'model.dim'", "not a LlamaConfig setting"]),
    ("number as a string", lambda m: m.update(rope_theta="10000"), ["'model.rope_theta' must be a number"]),
    ("fractional head count", lambda m: m.update(n_heads=4.5), ["'model.n_heads' must be an integer"]),
    ("flag as a string", lambda m: m.update(tie_embeddings="yes"), ["'model.tie_embeddings' must be true or false"]),
    ("unknown family", lambda m: m.update(family="mamba"), ["'model.family' must be 'llama' or 'gpt2'"]),
]


@pytest.mark.parametrize("edit, phrases", [c[1:] for c in STATE_EDITS], ids=[c[0] for c in STATE_EDITS])
def test_a_bad_model_key_in_state_json_is_named(micro_run, tmp_path, capsys, edit, phrases):
    run = tmp_path / "run"
    shutil.copytree(micro_run, run)
    folder = _edit_state(run, edit)
    before = _tree(tmp_path)
    with pytest.raises(CheckpointError) as e:
        ck.load(str(run))
    msg = str(e.value)
    assert f"{folder}: state.json" in msg and "unexpected keyword" not in msg and "__init__" not in msg, msg
    for p in phrases:
        assert p in msg, (p, msg)
    assert main(["train", "--resume", str(run), "--more-steps", "1", "--no-progress", "--sample-tokens", "0"]) == 1
    _one_line_error(capsys, "state.json", *phrases)
    assert _tree(tmp_path) == before


# ============================================================================= not misleading: tensor names
def _hf_copy(tmp_path, family: str, edit) -> Path:
    d = tmp_path / family
    shutil.copytree(FIXTURES / family, d)
    f = SafetensorsFile(str(d / "model.safetensors"))
    tensors = {n: np.array(f.get(n), np.float32) for n in f.names}
    del f
    edit(tensors)
    write_safetensors(str(d / "model.safetensors"), tensors)
    return d


def _nan_rows(name, rows):
    def edit(t):
        t[name][rows] = np.nan
    return edit


TENSOR_EDITS = [
    ("untied head missing", "llama3", lambda t: t.pop("lm_head.weight"),
     ["missing tensor(s) ['lm_head.weight']"], ["wcls"]),
    ("a projection missing", "llama3", lambda t: t.pop("model.layers.1.self_attn.q_proj.weight"),
     ["missing tensor(s) ['model.layers.1.self_attn.q_proj.weight']"], ["layers.1.wq"]),
    ("a q_norm missing", "qwen3", lambda t: t.pop("model.layers.0.self_attn.q_norm.weight"),
     ["'model.layers.0.self_attn.q_norm.weight'"], ["'layers.0.q_norm'"]),
    ("NaN in down_proj", "llama3", _nan_rows("model.layers.0.mlp.down_proj.weight", 0),
     ["tensor 'model.layers.0.mlp.down_proj.weight' contains NaN or inf"], ["layers.0.w2"]),
    ("NaN in a Gemma sandwich norm", "gemma3", _nan_rows("model.layers.1.post_feedforward_layernorm.weight", 0),
     ["'model.layers.1.post_feedforward_layernorm.weight' contains NaN"], ["rms_ffn_post"]),
    ("NaN in Phi-3's fused k rows", "phi3", _nan_rows("model.layers.0.self_attn.qkv_proj.weight", 33),
     ["'model.layers.0.self_attn.qkv_proj.weight (k rows)' contains NaN"], ["layers.0.wk"]),
    ("Phi-3 gate_up missing", "phi3", lambda t: t.pop("model.layers.1.mlp.gate_up_proj.weight"),
     ["'model.layers.1.mlp.gate_up_proj.weight (gate rows)'", "(up rows)"], ["layers.1.w1"]),
]


@pytest.mark.parametrize("family, edit, phrases, internal", [c[1:] for c in TENSOR_EDITS],
                         ids=[c[0] for c in TENSOR_EDITS])
def test_loader_errors_name_the_checkpoints_tensors(tmp_path, family, edit, phrases, internal):
    d = _hf_copy(tmp_path, family, edit)
    before = _tree(tmp_path)
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    msg = str(e.value)
    for p in phrases:
        assert p in msg, (p, msg)
    for n in internal:
        assert n not in msg, (n, msg)
    assert _tree(tmp_path) == before


def test_a_value_beyond_fp16_names_the_checkpoints_tensor(tmp_path, monkeypatch):
    def edit(t):
        t["model.embed_tokens.weight"][3, 1] = 1e5
    d = _hf_copy(tmp_path, "llama3", edit)
    monkeypatch.setenv("ORION_CACHE_DIR", str(tmp_path / "cache"))
    before = _tree(d)
    with pytest.raises(ModelFormatError) as e:
        load_weights(str(d))
    msg = str(e.value)
    assert "'model.embed_tokens.weight' has values beyond the fp16 range" in msg and "tok_emb" not in msg, msg
    assert _tree(d) == before
    cache = tmp_path / "cache"
    assert not cache.exists() or not [p for p in _tree(cache) if p.endswith(".safetensors")]    # nothing cached
