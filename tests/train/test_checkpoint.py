"""Checkpoints: atomic writes (a kill mid-write leaves the previous checkpoint as "latest"), corruption
detection, resume equality (N steps == k + (N - k) steps), incompatible resume, input weights never
overwritten, llama2.c / Hugging Face export."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from train_helpers import lively_params, micro_config, minimal_state, token_stream
from orion.train import checkpoint as ck
from orion.train.data import TokenDataset
from orion.train.errors import CheckpointError, ResumeMismatch
from orion.train.model import write_hf, write_llama2c
from orion.train.trainer import TrainConfig, Trainer


def _tc(tmp_path, **kw):
    base = dict(steps=6, batch=2, accum=1, lr=3e-3, warmup=2, seed=11, device="sim", val_fraction=0.0,
                ckpt_dir=str(tmp_path / "run"))
    base.update(kw)
    return TrainConfig(**base)


def _trainer(cfg, tokens, tc, resume=None):
    return Trainer(cfg, tc, lively_params(cfg), TokenDataset(tokens, cfg.n_ctx, cfg.vocab_size, tc.val_fraction,
                                                             tc.seed), resume=resume)


def test_resume_gives_the_same_losses(tmp_path):
    cfg = micro_config()
    tokens = token_stream()
    full = _trainer(cfg, tokens, _tc(tmp_path, ckpt_dir=None))
    want = full.train().losses
    full.close()
    a = _trainer(cfg, tokens, _tc(tmp_path))
    first = a.train(stop_after=3)
    a.close()
    assert first.status == "stopped" and len(first.losses) == 3
    state = ck.load(str(tmp_path / "run"))
    assert state.step == 3 and state.state["data"]["cursor"] == 6 and state.state["optimizer"]["t"] == 3
    b = _trainer(cfg, tokens, _tc(tmp_path), resume=state)   # fresh init weights, replaced by the checkpoint
    rest = b.train()
    b.close()
    assert rest.step == 6
    np.testing.assert_array_equal(first.losses + rest.losses, want)


def test_save_load_roundtrip_and_corruption(tmp_path):
    cfg = micro_config()
    p = lively_params(cfg)
    opt = {"m.a": np.ones(3, np.float32), "v.a": np.zeros(3, np.float32)}
    d = str(tmp_path / "c")
    ck.save(d, 5, p, opt, minimal_state(hello=1), {"tokenizer.model": b"tok"})
    got = ck.load(d)
    assert got.step == 5 and got.state["hello"] == 1 and got.tokenizer == b"tok"
    for k in p:
        np.testing.assert_array_equal(got.params[k], p[k])
    model = os.path.join(d, "step-00000005", "model.safetensors")
    data = bytearray(open(model, "rb").read())
    data[-7] ^= 0x40
    open(model, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        ck.load(d)
    open(model, "wb").write(bytes(data[:100]))
    with pytest.raises(CheckpointError, match="truncated|bytes"):
        ck.load(d)
    with open(os.path.join(d, "latest.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(CheckpointError, match="corrupt latest.json"):
        ck.load(d)
    with pytest.raises(CheckpointError, match="not an orion train checkpoint"):
        ck.load(str(tmp_path))
    with pytest.raises(CheckpointError, match="no such"):
        ck.load(str(tmp_path / "missing"))


_KILLER = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    from orion.native import safetensors as st
    from orion.train import checkpoint as ck
    from train_helpers import minimal_state
    d = sys.argv[1]
    p = {"w": np.arange(1 << 16, dtype=np.float32)}
    ck.save(d, 1, p, {}, minimal_state(n=1))
    real = st.write
    def dying(f, tensors, metadata=None):
        real(f, tensors, metadata)
        f.flush()
        os.kill(os.getpid(), signal.SIGKILL)   # killed mid-checkpoint, after bytes hit the temp folder
    st.write = dying
    ck.save(d, 2, {"w": p["w"] * 2}, {}, minimal_state(n=2))
""")


def test_kill_during_a_write_keeps_the_previous_checkpoint(tmp_path):
    d = str(tmp_path / "run")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, "-c", _KILLER, d], env=env, capture_output=True, timeout=120)
    assert r.returncode == -9, r.stderr.decode()
    assert any(n.startswith(".tmp-step-00000002") for n in os.listdir(d))      # the half-written one
    got = ck.load(d)
    assert got.step == 1 and got.state["n"] == 1
    np.testing.assert_array_equal(got.params["w"], np.arange(1 << 16, dtype=np.float32))
    ck.save(d, 2, {"w": got.params["w"]}, {}, minimal_state(n=2))            # the next save cleans up
    assert not any(n.startswith(".tmp-") for n in os.listdir(d))


def test_incompatible_resume_is_a_typed_error(tmp_path):
    cfg = micro_config()
    tokens = token_stream()
    a = _trainer(cfg, tokens, _tc(tmp_path, steps=1))
    a.train()
    a.close()
    state = ck.load(str(tmp_path / "run"))
    with pytest.raises(ResumeMismatch, match="model.d_model"):
        other = micro_config(dim=32, hidden_dim=96)
        Trainer(other, _tc(tmp_path), lively_params(other),
                TokenDataset(tokens, other.n_ctx, other.vocab_size, 0.0, 11), resume=state)
    with pytest.raises(ResumeMismatch, match="batch"):
        _trainer(cfg, tokens, _tc(tmp_path, batch=3), resume=state)
    with pytest.raises(ResumeMismatch, match="data"):
        _trainer(cfg, tokens[::-1].copy(), _tc(tmp_path), resume=state)


def test_input_weights_are_never_overwritten(tmp_path):
    cfg = micro_config()
    p = lively_params(cfg)
    src = tmp_path / "base.bin"
    write_llama2c(str(src), cfg, p)
    before = src.read_bytes()
    ck.protect(str(src))
    try:
        with pytest.raises(CheckpointError, match="never overwrites"):
            write_llama2c(str(src), cfg, {k: v * 2 for k, v in p.items()})
        with pytest.raises(CheckpointError, match="never overwrites"):
            ck.save(str(src), 1, p, {}, {})
    finally:
        ck._protected.discard(os.path.realpath(str(src)))
    assert src.read_bytes() == before


@pytest.mark.parametrize("tied", [True, False])
def test_export_roundtrips_through_the_model_loaders(tmp_path, tied):
    loaders = pytest.importorskip("orion.models.loaders")
    from orion.train.model import init_params, load_pretrained
    cfg = micro_config(n_kv_heads=2, tie_embeddings=tied)
    p = init_params(cfg, 4)
    write_llama2c(str(tmp_path / "m.bin"), cfg, p)
    write_hf(str(tmp_path / "hf"), cfg, p)
    for path in (tmp_path / "m.bin", tmp_path / "hf"):
        cfg2, p2 = load_pretrained(str(path))
        assert cfg2 == cfg, (path, cfg2)
        assert set(p2) == set(p)
        for k in p:
            np.testing.assert_array_equal(p2[k], p[k], err_msg=f"{path}: {k}")
    ck_hf = loaders.read_checkpoint(str(tmp_path / "hf"))
    assert ck_hf.kind == "hf"


def test_a_save_removes_what_killed_writes_left(tmp_path):
    """A .latest.json.*.tmp (killed latest.json replace) and a hidden step folder (killed checkpoint write)
    are gone after the next save."""
    d = tmp_path / "run"
    d.mkdir()
    (d / ".latest.json.k3j2.tmp").write_text("{")
    (d / ".tmp-step-00000001-x").mkdir()
    ck.save(str(d), 1, {"w": np.zeros(3, np.float32)}, {}, minimal_state())
    assert sorted(os.listdir(d)) == ["latest.json", "step-00000001"]
