"""Hub names (org/name) resolve through huggingface_hub's cache without network: a cache laid out as
huggingface_hub lays it out (models--org--name/{blobs,refs/main,snapshots/<rev>}) under HF_HUB_CACHE /
HF_HOME read at call time; offline and absent is a ModelFormatError that says how to fix it; local
paths win over Hub names."""

from __future__ import annotations

import argparse
import hashlib
import io
import os

import numpy as np
import pytest

pytest.importorskip("huggingface_hub")

from orion.errors import ModelFormatError  # noqa: E402
from orion.models import load  # noqa: E402
from orion.models.model import resolve_model_path  # noqa: E402
from orion.models.hub import hub_cache_dir, is_repo_id, resolve_repo  # noqa: E402

from ckpt_writers import write_hf_llama  # noqa: E402
from models_helpers import tiny_llama, weights16  # noqa: E402

REV = "0123456789abcdef0123456789abcdef01234567"


def put_in_cache(cache, repo_id: str, src_dir) -> str:
    """Files of ``src_dir`` as a cached snapshot: content-addressed blobs, snapshot symlinks, refs/main."""
    repo = os.path.join(cache, "models--" + repo_id.replace("/", "--"))
    snap = os.path.join(repo, "snapshots", REV)
    os.makedirs(os.path.join(repo, "blobs"))
    os.makedirs(os.path.join(repo, "refs"))
    os.makedirs(snap)
    for name in sorted(os.listdir(src_dir)):
        with open(os.path.join(src_dir, name), "rb") as f:
            data = f.read()
        blob = hashlib.sha256(data).hexdigest()
        with open(os.path.join(repo, "blobs", blob), "wb") as f:
            f.write(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(snap, name))
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(REV)
    return snap


@pytest.fixture()
def offline_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return str(cache)


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_hf")
    cfg = tiny_llama(vocab_size=64, n_ctx=32)
    w = weights16(cfg, seed=4, std=0.15)
    write_hf_llama(d, cfg, {k: v.astype(np.float32) for k, v in w.items()})
    return d


def test_repo_id_shape():
    for ok in ("Qwen/Qwen3-0.6B", "meta-llama/Llama-3.2-1B", "HuggingFaceTB/SmolLM2-135M-Instruct", "a/b.c"):
        assert is_repo_id(ok), ok
    for bad in ("model.bin", "/abs/path", "./x/y", "a/b/c", "a/../b", "a--b/c", "../x", "org/"):
        assert not is_repo_id(bad), bad


def test_cache_dir_follows_the_environment_at_call_time(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hub_cache_dir() == str(tmp_path / "home" / "hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "c"))
    assert hub_cache_dir() == str(tmp_path / "c")


def test_cached_snapshot_resolves_offline(offline_cache, tiny_hf):
    snap = put_in_cache(offline_cache, "acme/tiny-llama", tiny_hf)
    assert resolve_repo("acme/tiny-llama") == snap
    assert resolve_model_path("acme/tiny-llama") == snap


def test_hf_home_layout(tmp_path, monkeypatch, tiny_hf):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    snap = put_in_cache(str(tmp_path / "home" / "hub"), "acme/tiny-llama", tiny_hf)
    assert resolve_repo("acme/tiny-llama") == snap


def test_offline_and_absent_says_how_to_fix(offline_cache):
    with pytest.raises(ModelFormatError) as e:
        resolve_model_path("acme/not-downloaded")
    msg = str(e.value)
    assert "acme/not-downloaded" in msg and "HF_HUB_OFFLINE" in msg and offline_cache in msg
    assert "hf download acme/not-downloaded" in msg and "local folder" in msg


def test_offline_with_a_partial_snapshot_says_so(offline_cache, tmp_path):
    (tmp_path / "only_config").mkdir()
    (tmp_path / "only_config" / "config.json").write_text("{}")
    snap = put_in_cache(offline_cache, "acme/partial", tmp_path / "only_config")
    with pytest.raises(ModelFormatError, match="safetensors") as e:
        resolve_repo("acme/partial")
    assert snap in str(e.value) and "HF_HUB_OFFLINE" in str(e.value)


def test_local_paths_win_over_hub_names(offline_cache, tiny_hf, tmp_path, monkeypatch):
    put_in_cache(offline_cache, "acme/tiny-llama", tiny_hf)
    (tmp_path / "acme" / "tiny-llama").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("acme/tiny-llama") == "acme/tiny-llama"


def test_load_and_generate_by_hub_name(offline_cache, tiny_hf, tmp_path):
    put_in_cache(offline_cache, "acme/tiny-llama", tiny_hf)
    m = load("acme/tiny-llama", device="sim", cache=str(tmp_path / "w"))
    ref = m.generate([1, 5, 9], max_tokens=4, stop_tokens=[]).tokens
    m.release()
    from orion.cli.generate import add_generate_parser, cmd_generate
    p = argparse.ArgumentParser()
    add_generate_parser(p.add_subparsers())
    args = p.parse_args(["generate", "--model", "acme/tiny-llama", "--prompt-ids", "1 5 9", "--max-tokens", "4",
                         "--device", "sim", "--cache-dir", str(tmp_path / "w"), "--stop-token", "-1"])
    out = io.StringIO()
    assert cmd_generate(args, out=out, err=io.StringIO()) == 0
    assert [int(t) for t in out.getvalue().split()] == ref
