"""Ctrl-C and kills at random moments of a real `orion train` process: whatever the moment
(setup, a step, a validation pass, a checkpoint write, the end), resuming gives the uninterrupted run's
final weights, optimizer state and per-step losses bit for bit; a first SIGINT saves the state of a
finished step, a second one exits 130 at once without writing."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from orion.train import checkpoint as ck

ARGS = ["train", "--preset", "tiny", "--steps", "8", "--batch", "4", "--ckpt-interval", "3", "--eval-interval", "4",
        "--eval-batches", "1", "--sample-tokens", "0", "--no-progress", "--seed", "5"]


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


def _start(run: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "orion.cli", *ARGS, "--ckpt-dir", run, *extra], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(run: str) -> None:
    """Continue ``run`` until its last step (a fresh start when no checkpoint was written yet)."""
    resume = ["--resume", run] if os.path.isfile(os.path.join(run, ck.LATEST)) else []
    p = subprocess.run([sys.executable, "-m", "orion.cli", *ARGS, "--ckpt-dir", run, *resume], env=_env(),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def _result(run: str) -> tuple[bytes, bytes, dict]:
    folder = ck.resolve(run)
    with open(os.path.join(folder, "model.safetensors"), "rb") as f, \
            open(os.path.join(folder, "optim.safetensors"), "rb") as g:
        weights, optim = f.read(), g.read()
    with open(os.path.join(run, "train_log.jsonl")) as f:
        losses = {d["step"]: d["loss"] for d in map(json.loads, f) if "loss" in d}
    return weights, optim, losses


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run's result, and its wall time before and after the header line (programs compiled)."""
    run = str(tmp_path_factory.mktemp("ref") / "run")
    t0 = time.monotonic()
    p = _start(run)
    assert p.stdout.readline().startswith("orion train:")
    t1 = time.monotonic()
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    return _result(run), t1 - t0, time.monotonic() - t1


CASES = [("int", 0), ("int", 1), ("int", 2), ("int", 3), ("int", 4), ("int-twice", 5), ("kill", 6), ("kill", 7),
         ("kill", 8)]


@pytest.mark.parametrize("kind,seed", CASES)
def test_resume_after_a_signal_at_a_random_moment_equals_the_uninterrupted_run(reference, tmp_path, kind, seed):
    (want_w, want_o, want_losses), setup, training = reference
    rng = random.Random(seed)
    run = str(tmp_path / "run")
    p = _start(run)
    if seed % 3 == 0:                                  # during setup (tokenizer, data, compile)
        time.sleep(rng.uniform(0.05, setup))
    else:                                              # any step, validation pass, checkpoint write, the end
        p.stdout.readline()
        time.sleep(rng.uniform(0.0, training))
    if p.poll() is None:
        p.send_signal(signal.SIGKILL if kind == "kill" else signal.SIGINT)
        if kind == "int-twice":
            time.sleep(0.05)
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=300)
    # 130: orion's exit after Ctrl-C; -2: Python's own, for a Ctrl-C before orion's main runs (imports)
    assert p.returncode in ((-9, 0) if kind == "kill" else (130, -2, 0)), (p.returncode, err)
    if kind == "int" and "interrupted at step" in out:
        st = ck.load(run)                              # the saved state is that of a finished step
        assert st.state["data"]["cursor"] == 4 * st.step and st.state["optimizer"]["t"] == st.step
    _finish(run)
    got_w, got_o, got_losses = _result(run)
    assert got_losses == want_losses, (p.returncode, out, err)
    assert got_w == want_w and got_o == want_o
    assert not [n for n in os.listdir(run) if n.startswith(".")]             # no litter once resumed


def test_a_second_ctrl_c_exits_without_writing(tmp_path):
    """SIGINT twice within a step (steps of ~0.5 s here): exit 130 at once, no checkpoint written (the first
    Ctrl-C alone would have saved after the step in flight)."""
    run = str(tmp_path / "run")
    p = _start(run, "--ckpt-interval", "0", "--eval-interval", "0", "--steps", "200", "--batch", "32")
    log = os.path.join(run, "train_log.jsonl")
    deadline = time.monotonic() + 120
    while not (os.path.isfile(log) and os.path.getsize(log)) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)                            # a first step logged: the training loop's handler is in place
    p.send_signal(signal.SIGINT)
    time.sleep(0.1)                                 # two signals at once may be delivered as one
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert "exiting without saving" in err
    assert not os.path.exists(os.path.join(run, ck.LATEST))


def _micro_trainer(tmp_path):
    from train_helpers import lively_params, micro_config, token_stream
    from orion.train.data import TokenDataset
    from orion.train.trainer import TrainConfig, Trainer
    cfg = micro_config()
    tc = TrainConfig(steps=6, batch=2, lr=3e-3, warmup=2, seed=11, device="sim", val_fraction=0.0,
                     ckpt_dir=str(tmp_path / "run"))
    return Trainer(cfg, tc, lively_params(cfg), TokenDataset(token_stream(), cfg.n_ctx, cfg.vocab_size, 0.0, 11))


def test_in_process_ctrl_c_stops_after_the_step_and_saves_it(tmp_path):
    before = signal.getsignal(signal.SIGINT)   # Python's default, or SIG_IGN when started in the background
    t = _micro_trainer(tmp_path)
    res = t.train(on_step=lambda rec: rec.step == 2 and os.kill(os.getpid(), signal.SIGINT))
    t.close()
    assert res.status == "interrupted" and res.step == 2
    st = ck.load(str(tmp_path / "run"))
    assert st.step == 2 and st.state["data"]["cursor"] == 4 and st.state["optimizer"]["t"] == 2
    assert signal.getsignal(signal.SIGINT) is before                            # the handler is put back


def test_in_process_a_second_ctrl_c_raises_without_saving(tmp_path):
    """A library caller (a notebook) gets a KeyboardInterrupt, not an exit; nothing is written."""
    def twice(rec):
        if rec.step == 2:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
    t = _micro_trainer(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        t.train(on_step=twice)
    t.close()
    assert not os.path.exists(str(tmp_path / "run"))
