"""Checkpoint loading: HF GPT-2 (Conv1D layout, both naming schemes, tied lm_head), HF Llama (rotate-half
rows un-permuted, GQA, tied/untied, sharded, BF16), llama2.c v0/v1/v2; the fp16 weight cache; and every
bad-input path raising a typed ModelFormatError / InputError that names the file, tensor and expectation."""

from __future__ import annotations

import json
import os
import shutil
import struct

import numpy as np
import pytest

import orion
from orion import InputError, ModelFormatError
from orion.models import Model, load, load_weights, read_checkpoint, reference
from orion.models.testing import random_weights

from ckpt_writers import (write_hf_gpt2, write_hf_llama, write_llama2c_v0, write_llama2c_v1,
                          write_llama2c_v2, write_safetensors)
from models_helpers import assert_logits_close, tiny_gpt2, tiny_llama, weights16


def _same(a: dict, b: dict, atol=0.0):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_allclose(np.asarray(a[k], np.float64), np.asarray(b[k], np.float64), atol=atol, err_msg=k)


# ------------------------------------------------------------------------------------------ HF GPT-2
@pytest.mark.parametrize("prefix,lm_head", [(False, False), (True, True)])
def test_hf_gpt2_conv1d_layout_and_names(tmp_path, prefix, lm_head):
    cfg = tiny_gpt2()
    w = random_weights(cfg, seed=3)
    write_hf_gpt2(tmp_path, cfg, w, prefix=prefix, lm_head=lm_head)
    ck = read_checkpoint(str(tmp_path))
    assert ck.config == cfg and ck.kind == "hf"
    _same(ck.weights, w)


def test_hf_gpt2_end_to_end_and_bf16(tmp_path):
    cfg = tiny_gpt2()
    w = weights16(cfg, seed=5)
    write_hf_gpt2(tmp_path, cfg, w, bf16=True)
    ck = read_checkpoint(str(tmp_path))
    bf = {k: (np.asarray(v, np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32) for k, v in w.items()}
    _same(ck.weights, bf)
    m = load(str(tmp_path), device="sim", cache=str(tmp_path / "cache"))
    ids = [5, 17, 300, 2, 99, 42, 7]
    w16 = {k: np.asarray(v, np.float16) for k, v in bf.items()}
    assert_logits_close(m.logits(ids), reference.forward(cfg, w16, ids), what="HF GPT-2 (bf16)")


# ------------------------------------------------------------------------------------------ HF Llama
@pytest.mark.parametrize("tied,shard", [(False, False), (True, True)])
def test_hf_llama_rotate_half_is_unpermuted(tmp_path, tied, shard):
    """The reference runs HF's rotate-half RoPE on the raw (permuted) HF weights; orion un-permutes
    Wq/Wk into llama2.c's adjacent layout and must produce the same logits."""
    cfg = tiny_llama(tie_embeddings=tied)
    w = weights16(cfg, seed=7)
    hf = write_hf_llama(tmp_path, cfg, w, shard=shard)
    ck = read_checkpoint(str(tmp_path))
    assert ck.config.n_kv_heads == 2 and ck.config.tie_embeddings == tied
    _same(ck.weights, w)
    hf_as_canonical = dict(w)
    for i in range(cfg.n_layers):
        hf_as_canonical[f"layers.{i}.wq"] = hf[f"model.layers.{i}.self_attn.q_proj.weight"]
        hf_as_canonical[f"layers.{i}.wk"] = hf[f"model.layers.{i}.self_attn.k_proj.weight"]
    ids = [1, 33, 7, 250, 12, 12, 99, 5, 300]
    ref_hf = reference.forward(cfg, hf_as_canonical, ids, rope_layout="rotate_half")
    ref_meta = reference.forward(cfg, w, ids)
    np.testing.assert_allclose(ref_hf, ref_meta, atol=1e-9)           # the permutation identity itself
    m = load(str(tmp_path), device="sim", cache=str(tmp_path / "cache"))
    assert_logits_close(m.logits(ids), ref_hf, what="HF Llama")


# ------------------------------------------------------------------------------------------ llama2.c
@pytest.mark.parametrize("tied", [True, False])
def test_llama2c_v0_v1_v2(tmp_path, tied):
    cfg = tiny_llama(tie_embeddings=tied, n_ctx=32)
    w = random_weights(cfg, seed=11)
    write_llama2c_v0(tmp_path / "v0.bin", cfg, w)
    write_llama2c_v1(tmp_path / "v1.bin", cfg, w)
    deq = write_llama2c_v2(tmp_path / "v2.bin", cfg, w)
    c0, c1, c2 = (read_checkpoint(str(tmp_path / f"v{i}.bin")) for i in range(3))
    assert (c0.kind, c1.kind, c2.kind) == ("llama2c-v0", "llama2c-v1", "llama2c-v2")
    assert c0.config == c1.config == c2.config == cfg
    _same(c0.weights, w)
    _same(c1.weights, w)
    expect2 = dict(w)
    expect2.update(deq)
    _same(c2.weights, expect2, atol=1e-7)
    assert max(np.abs(c2.weights[k] - w[k]).max() for k in deq) < 0.01      # Q8_0 really quantised


# ------------------------------------------------------------------------------------------ cache
def test_weight_cache_is_content_keyed_atomic_and_self_healing(tmp_path):
    cfg = tiny_llama(n_ctx=32)
    w = random_weights(cfg, seed=13)
    src = tmp_path / "m.bin"
    write_llama2c_v0(src, cfg, w)
    cache = tmp_path / "cache"
    a = load_weights(str(src), cache=str(cache))
    assert a.cache_file and os.path.exists(a.cache_file) and a.kind == "llama2c-v0"
    assert all(v.dtype == np.float16 for v in a.weights.values())
    _same(a.weights, {k: v.astype(np.float16) for k, v in w.items()})
    mtime = os.path.getmtime(a.cache_file)
    b = load_weights(str(src), cache=str(cache))                     # hit: nothing rewritten
    assert b.cache_file == a.cache_file and os.path.getmtime(b.cache_file) == mtime and b.kind == "llama2c-v0"
    assert not [f for f in os.listdir(cache / "weights") if f.endswith(".tmp")]
    # same content elsewhere -> same entry (keyed by content, not by path)
    shutil.copy(src, tmp_path / "copy.bin")
    assert load_weights(str(tmp_path / "copy.bin"), cache=str(cache)).cache_file == a.cache_file
    # a corrupt entry is rebuilt
    with open(a.cache_file, "r+b") as f:
        f.truncate(100)
    c = load_weights(str(src), cache=str(cache))
    _same(c.weights, a.weights)
    assert os.path.getsize(c.cache_file) > 100
    # different content -> different entry
    w2 = dict(w)
    w2["rms_final"] = w["rms_final"] + 1
    write_llama2c_v0(tmp_path / "other.bin", cfg, w2)
    assert load_weights(str(tmp_path / "other.bin"), cache=str(cache)).cache_file != a.cache_file
    # $ORION_CACHE_DIR is honoured
    env = tmp_path / "envcache"
    old = os.environ.get("ORION_CACHE_DIR")
    os.environ["ORION_CACHE_DIR"] = str(env)
    try:
        assert load_weights(str(src)).cache_file.startswith(str(env))
    finally:
        if old is None:
            del os.environ["ORION_CACHE_DIR"]
        else:
            os.environ["ORION_CACHE_DIR"] = old


# ------------------------------------------------------------------------------------------ bad input
def _gpt2_dir(tmp_path, **kw):
    cfg = tiny_gpt2(n_layers=1)
    d = tmp_path / "gpt2"
    t = write_hf_gpt2(d, cfg, random_weights(cfg), **kw)
    return cfg, d, t


def _expect(exc, *needles):
    msg = str(exc.value)
    for n in needles:
        assert n in msg, f"{n!r} not in error message: {msg}"


def test_missing_files(tmp_path):
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(tmp_path / "nope.bin"))
    _expect(e, "nope.bin", "no such file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(tmp_path / "empty"))
    _expect(e, "config.json")
    cfg, d, _ = _gpt2_dir(tmp_path)
    os.remove(d / "model.safetensors")
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "model.safetensors", "no such file")
    with pytest.raises(ModelFormatError):
        load("definitely-not-a-model-name-xyz", device="sim")


def test_corrupt_and_truncated_safetensors(tmp_path):
    cfg, d, _ = _gpt2_dir(tmp_path)
    p = d / "model.safetensors"
    raw = p.read_bytes()
    p.write_bytes(raw[: len(raw) - 100])                            # data truncated
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, str(p), "truncated", "ends at byte")
    p.write_bytes(raw[:20])                                           # header truncated
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "header length")
    n = struct.unpack("<Q", raw[:8])[0]
    p.write_bytes(raw[:8] + b"{not json" + raw[17:])
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "not JSON")
    hdr = json.loads(raw[8:8 + n])
    name = next(k for k in hdr if k != "__metadata__")
    hdr[name]["dtype"] = "C64"
    h = json.dumps(hdr).encode()
    p.write_bytes(struct.pack("<Q", len(h)) + h + raw[8 + n:])
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, name, "unsupported dtype 'C64'")


def test_config_errors_and_unsupported_architectures(tmp_path):
    cfg, d, _ = _gpt2_dir(tmp_path)
    (d / "config.json").write_text("{broken")
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "config.json", "not valid JSON")
    for conf, needle in [({"model_type": "bert"}, "unsupported architecture"),
                         ({"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4, "vocab_size": 384,
                           "n_positions": 64, "activation_function": "relu"}, "activation_function"),
                         ({"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 5, "vocab_size": 384,
                           "n_positions": 64}, "not divisible"),
                         ({"model_type": "gpt2", "n_layer": 1, "n_head": 4, "vocab_size": 384,
                           "n_positions": 64}, "missing config key 'n_embd'"),
                         ({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                           "num_attention_heads": 4, "vocab_size": 384, "max_position_embeddings": 64,
                           "rope_scaling": {"type": "yarn", "factor": 2.0}}, "yarn"),
                         ({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
                           "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 384,
                           "max_position_embeddings": 64}, "n_kv_heads")]:
        (d / "config.json").write_text(json.dumps(conf))
        with pytest.raises(ModelFormatError) as e:
            read_checkpoint(str(d))
        _expect(e, "config.json", needle)


def test_tensor_mismatches(tmp_path):
    cfg, d, t = _gpt2_dir(tmp_path)
    st = d / "model.safetensors"

    def rewrite(tensors):
        write_safetensors(st, {k: np.ascontiguousarray(v, np.float32) for k, v in tensors.items()})

    bad = dict(t)
    bad["h.0.attn.c_attn.weight"] = np.zeros((3 * 64, 64), np.float32)     # nn.Linear layout, not Conv1D
    rewrite(bad)
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, str(st), "h.0.attn.c_attn.weight", "[192, 64]", "expected [64, 192]", "Conv1D")
    bad = dict(t)
    del bad["h.0.mlp.c_fc.bias"]
    rewrite(bad)
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "missing tensor", "h.0.mlp.c_fc.bias")      # the name in the file, not orion's h.0.bfc
    bad = dict(t)
    bad["h.0.attn.rotary.weight"] = np.zeros(3, np.float32)
    rewrite(bad)
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "unknown tensor name", "h.0.attn.rotary.weight")
    bad = dict(t)
    bad["h.3.ln_1.weight"] = np.zeros(64, np.float32)                 # layer beyond n_layer
    rewrite(bad)
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "h.3.ln_1.weight")
    bad = dict(t)
    bad["lm_head.weight"] = np.ones_like(t["wte.weight"])
    rewrite(bad)
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "lm_head.weight", "untied")
    bad = dict(t)
    bad["ln_f.weight"] = np.full(64, np.nan, np.float32)
    rewrite(bad)
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "'ln_f.weight'", "NaN")      # the name in the file, not orion's ln_f.g
    # config / tensor disagreement: config says 2 layers, file has 1
    rewrite(t)
    conf = json.loads((d / "config.json").read_text())
    conf["n_layer"] = 2
    (d / "config.json").write_text(json.dumps(conf))
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(d))
    _expect(e, "configuration says 2 layers", "weights hold 1", "config.json does not belong")


def test_llama2c_bad_files(tmp_path):
    cfg = tiny_llama(n_ctx=32)
    w = random_weights(cfg, seed=1)
    p = tmp_path / "m.bin"
    write_llama2c_v0(p, cfg, w)
    raw = p.read_bytes()
    p.write_bytes(raw[:-40])
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(p))
    _expect(e, "m.bin", "truncated", f"expected {len(raw)}")
    p.write_bytes(raw[:10])
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(p))
    _expect(e, "truncated")
    p.write_bytes(struct.pack("<7i", 64, 128, 2, 5, 5, 384, 32) + raw[28:])   # 64 not divisible by 5 heads
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(p))
    _expect(e, "not a llama2.c checkpoint", "n_heads")
    p.write_bytes(b"\x00" * 1000)
    with pytest.raises(ModelFormatError):
        read_checkpoint(str(p))
    write_llama2c_v2(p, cfg, w)
    raw = bytearray(p.read_bytes())
    raw[37:41] = struct.pack("<i", 48)                                     # group size not dividing dim
    p.write_bytes(bytes(raw))
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(p))
    _expect(e, "group size 48")
    raw[4:8] = struct.pack("<i", 7)
    p.write_bytes(bytes(raw))
    with pytest.raises(ModelFormatError) as e:
        read_checkpoint(str(p))
    _expect(e, "version 7")


def test_prompt_and_token_errors():
    cfg = tiny_llama(n_ctx=32)
    m = Model(cfg, weights16(cfg), device="sim")
    with pytest.raises(InputError) as e:
        m.generate(list(range(1, 40)))
    _expect(e, "39 tokens", "context", "32")
    with pytest.raises(InputError) as e:
        m.generate([1, 5000])
    _expect(e, "5000", "vocabulary")
    with pytest.raises(InputError) as e:
        m.generate("text needs a tokenizer")
    _expect(e, "no tokenizer")
    with pytest.raises(InputError):
        m.generate([1, 2], temperature=-1)
    with pytest.raises(InputError):
        m.generate([1, 2], top_p=0)
    with pytest.raises(InputError):
        m.generate([], max_tokens=3)
    g = m.generate([1] * 30, max_tokens=10, stop_tokens=[])     # runs into the context: stops cleanly
    assert g.stop_reason == "context" and len(g.tokens) == 3
    assert isinstance(e.value, orion.OrionError)


def test_weight_cache_is_capped_pruned_and_can_be_turned_off(tmp_path, monkeypatch):
    """Temp files of killed writes are pruned, the cache stays under ORION_CACHE_MAX_GB
    (least recently used entries go first), ORION_CACHE_MAX_GB=0 and use_cache=False write nothing, and
    files are created with the user's umask, not mkstemp's 0600."""
    import time
    srcs = []
    for i in range(3):
        cfg = tiny_gpt2(n_layers=1)
        d = tmp_path / f"m{i}"
        write_hf_gpt2(d, cfg, random_weights(cfg, seed=i))
        srcs.append(d)
    cache = tmp_path / "cache"
    root = cache / "weights"
    root.mkdir(parents=True)
    stale = root / ".x.safetensors.abc.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    fresh = root / ".y.safetensors.abc.tmp"
    fresh.write_bytes(b"being written")
    old_mask = os.umask(0o027)
    try:
        first = load_weights(str(srcs[0]), cache=str(cache)).cache_file
    finally:
        os.umask(old_mask)
    assert not stale.exists() and fresh.exists()
    assert os.stat(first).st_mode & 0o777 == 0o640
    size = os.path.getsize(first)
    monkeypatch.setenv("ORION_CACHE_MAX_GB", str(2.5 * size / 2 ** 30))       # room for two entries
    os.utime(first, (time.time() - 100, time.time() - 100))
    second = load_weights(str(srcs[1]), cache=str(cache)).cache_file
    os.utime(second, (time.time() - 50, time.time() - 50))
    load_weights(str(srcs[0]), cache=str(cache))                                # a hit makes it recent
    third = load_weights(str(srcs[2]), cache=str(cache)).cache_file
    assert os.path.exists(first) and os.path.exists(third) and not os.path.exists(second)
    monkeypatch.setenv("ORION_CACHE_MAX_GB", "0")
    assert load_weights(str(srcs[1]), cache=str(cache)).cache_file is None
    monkeypatch.setenv("ORION_CACHE_MAX_GB", "lots")
    with pytest.raises(ModelFormatError, match="ORION_CACHE_MAX_GB"):
        load_weights(str(srcs[1]), cache=str(cache))
