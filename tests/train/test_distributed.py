"""Data-parallel ``orion train`` under MPI (orion.train.distributed, accumulate.py).

Pins down: without a launcher nothing changes and mpi4py is never imported; the step gradient is the
in-order fold of microbatch gradients; N ranks (2 and 3, one microbatch each) end with weights BITWISE
equal to one process with ``--accum N``, LoRA included (only adapters in the checkpoint); a per-rank
``--accum`` draws the same examples as one process (same data position, equal up to rounding); a
checkpoint resumes on another rank count with the same global batch (and refuses a count that does
not divide it); ranks started from different weights/data/options are refused; a rank that hangs or dies
stops the job with a message instead of a hang; a stop request (Ctrl-C) seen by one rank stops every rank
after the same step; Ctrl-C on ``mpiexec`` stops every rank with a checkpoint written by rank 0.

The multi-process tests need ``mpiexec`` and mpi4py (``pip install "orion-ane[distributed]"``, part of
the test extra) and skip cleanly without them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from orion.native import safetensors as st
from orion.train.accumulate import StepGradients, bucket_names, flat_grads
from orion.train.data import TokenDataset
from orion.train.distributed import launched

FAST = ["--preset", "micro", "--batch", "2", "--no-progress", "--seq-len", "64", "--warmup", "2", "--sample-tokens", "0",
        "--eval-interval", "0"]


# ------------------------------------------------------------------------------------ without MPI
def test_launch_detection_needs_a_launcher_with_several_ranks(monkeypatch):
    for v in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_RANK",
              "MV2_COMM_WORLD_SIZE"):
        monkeypatch.delenv(v, raising=False)
    assert launched() is None
    monkeypatch.setenv("PMI_RANK", "0")
    monkeypatch.setenv("PMI_SIZE", "1")
    assert launched() is None                       # mpiexec -n 1: a plain single-process run
    monkeypatch.setenv("PMI_SIZE", "3")
    monkeypatch.setenv("PMI_RANK", "2")
    assert launched() == (2, 3)
    monkeypatch.delenv("PMI_RANK")
    monkeypatch.delenv("PMI_SIZE")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert launched() == (1, 2)


def test_single_process_training_never_imports_mpi4py(tmp_path):
    code = ("import sys; from orion.cli.train import main; "
            f"rc = main({FAST + ['--steps', '1', '--no-ckpt']!r}); "
            "sys.exit(rc or (3 if 'mpi4py' in sys.modules else 0))")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "OMPI_", "MV2_"))}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


def test_skip_advances_exactly_like_drawing_windows():
    toks = (np.arange(64 * 10 + 1) % 50).astype(np.uint16)
    a = TokenDataset(toks, 64, 64, val_fraction=0.0, seed=3)
    b = TokenDataset(toks, 64, 64, val_fraction=0.0, seed=3)
    for n in (3, 7, 13):                             # across epoch boundaries (10 windows per epoch)
        a.next_batch(n)
        b.skip(n)
        assert a.state() == b.state()
        assert np.array_equal(a.next_batch(2), b.next_batch(2))


def test_step_gradient_is_the_in_order_fold_of_microbatch_gradients():
    rng = np.random.default_rng(0)
    params = {"layers.0.w": np.zeros((3, 5), np.float32), "tok_emb": np.zeros((4, 2), np.float32)}
    buckets = bucket_names(params, 1)
    assert buckets == [["layers.0.w"], ["tok_emb"]]
    g = StepGradients(flat_grads(params, buckets)[0], buckets, 1)
    parts = [[(rng.standard_normal((3, 5)) * 10.0 ** rng.integers(-3, 4)).astype(np.float32) for _ in range(3)]
             for _ in range(3)]                      # 3 microbatches of 3 contributions each
    g.start()
    for k, mb in enumerate(parts):
        g.begin_micro(last=k == 2)
        for x in mb:
            g.add("layers.0.w", x)
        g.layer_done(0)
        g.end_micro()
    g.finish()
    m = [(p[0] + p[1]) + p[2] for p in parts]
    assert np.array_equal(g["layers.0.w"], (m[0] + m[1]) + m[2])
    assert not g["tok_emb"].any()                     # never written: zero
    flat = parts[0][0].copy()                         # the plain element-by-element sum rounds differently
    for x in parts[0][1:] + parts[1] + parts[2]:
        flat += x
    assert not np.array_equal(flat, g["layers.0.w"])


# ------------------------------------------------------------------------------------ under mpiexec
def _mpiexec():
    exe = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return exe if os.path.exists(exe) else shutil.which("mpiexec")


def _env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


@pytest.fixture(scope="module")
def mpiexec():
    exe = _mpiexec()
    if exe is None:
        pytest.skip("no mpiexec (pip install \"orion-ane[distributed]\")")
    try:
        r = subprocess.run([exe, "-n", "2", sys.executable, "-c",
                            "from mpi4py import MPI; assert MPI.COMM_WORLD.Get_size() == 2"],
                           env=_env(), capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.skip("mpiexec -n 2 does not start")
    if r.returncode != 0:
        pytest.skip(f"mpiexec/mpi4py unusable here: {(r.stderr or r.stdout).strip()[-300:]}")
    return exe


def _train(args, n=None, mpiexec=None, timeout=300, check=True):
    cmd = [sys.executable, "-m", "orion.cli.train"] + FAST + args
    if n is not None:
        cmd = [mpiexec, "-n", str(n)] + cmd
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout)
    if check:
        assert r.returncode == 0, r.stdout + r.stderr
    return r


def _weights(run, step):
    w, _ = st.load(os.path.join(run, f"step-{step:08d}", "model.safetensors"))
    return {k: np.asarray(v) for k, v in w.items()}


def _state(run, step):
    with open(os.path.join(run, f"step-{step:08d}", "state.json")) as f:
        return json.load(f)


def _bitwise(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        assert np.array_equal(a[k], b[k]), f"{k}: max |diff| {np.abs(a[k] - b[k]).max()}"


@pytest.mark.parametrize("n", [2, 3])
def test_ranks_give_bitwise_the_weights_of_one_process_with_accum_n(tmp_path, mpiexec, n):
    r = _train(["--steps", "3", "--ckpt-dir", str(tmp_path / "mpi")], n, mpiexec)
    assert f"batch 2x{n} ({n} MPI ranks x 1 microbatches)" in r.stdout
    assert r.stdout.count("orion train:") == 1       # rank 0 reports, the others are quiet
    _train(["--steps", "3", "--accum", str(n), "--ckpt-dir", str(tmp_path / "one")])
    _bitwise(_weights(tmp_path / "mpi", 3), _weights(tmp_path / "one", 3))
    a, b = _state(tmp_path / "mpi", 3), _state(tmp_path / "one", 3)
    assert a["history"] == b["history"] and a["data"] == b["data"] and a["train"]["accum"] == n


def test_lora_ranks_reduce_only_the_adapters(tmp_path, mpiexec):
    lora = ["--lora", "r=4,alpha=8,targets=q,v", "--steps", "3"]
    _train(lora + ["--ckpt-dir", str(tmp_path / "mpi")], 2, mpiexec)
    _train(lora + ["--accum", "2", "--ckpt-dir", str(tmp_path / "one")])
    w = _weights(tmp_path / "mpi", 3)
    assert w and all(k.endswith((".lora_A", ".lora_B")) for k in w)
    _bitwise(w, _weights(tmp_path / "one", 3))


def test_per_rank_accum_draws_the_same_examples_as_one_process(tmp_path, mpiexec):
    """2 ranks x --accum 2 = one process with --accum 4: the same windows (data position, token count);
    the gradient is summed as (m0+m1)+(m2+m3), so the weights agree up to rounding, not bitwise."""
    _train(["--steps", "2", "--accum", "2", "--ckpt-dir", str(tmp_path / "mpi")], 2, mpiexec)
    _train(["--steps", "2", "--accum", "4", "--ckpt-dir", str(tmp_path / "one")])
    a, b = _state(tmp_path / "mpi", 2), _state(tmp_path / "one", 2)
    assert a["data"] == b["data"] and a["train"]["accum"] == 4
    wa, wb = _weights(tmp_path / "mpi", 2), _weights(tmp_path / "one", 2)
    # AdamW normalises each element's step (m/sqrt(v)): a gradient element of rounding size moves its weight
    # by up to the learning rate (1e-3 and 2e-3 here) either way, so a few elements differ by ~1e-5; other
    # windows would move nearly all of them by ~lr
    for k in wa:
        np.testing.assert_allclose(wa[k], wb[k], rtol=1e-4, atol=1e-4)


def test_resume_on_another_rank_count_keeps_the_global_batch(tmp_path, mpiexec):
    run = str(tmp_path / "run")
    _train(["--steps", "2", "--ckpt-dir", run], 2, mpiexec)               # global accum 2
    _train(["--steps", "3", "--resume", run])                             # one process: --accum 2 from the checkpoint
    _train(["--steps", "4", "--resume", run], 2, mpiexec)
    _train(["--steps", "4", "--accum", "2", "--ckpt-dir", str(tmp_path / "one")])
    _bitwise(_weights(run, 4), _weights(tmp_path / "one", 4))
    r = _train(["--steps", "5", "--resume", run], 3, mpiexec, check=False)
    assert r.returncode == 1                          # a typed error: exit 1, as without MPI
    assert "3 ranks cannot share evenly" in r.stderr and "[1, 2]" in r.stderr


DRIVER = """
import os, signal, sys, time
from orion.train import step
rank, mode, at = int(os.environ["PMI_RANK"]), sys.argv[1], int(sys.argv[2])
orig, calls = step.StepEngine.microbatch, [0]
def microbatch(self, *a, **k):
    calls[0] += 1
    if rank == 1 and calls[0] == at:
        if mode == "hang":
            time.sleep(3600)
        if mode == "sigint":                 # Ctrl-C reaching this rank alone, in the middle of a step
            os.kill(os.getpid(), signal.SIGINT)
        else:
            os._exit(7)
    return orig(self, *a, **k)
step.StepEngine.microbatch = microbatch
from orion.cli.train import main
sys.exit(main(sys.argv[3:]))
"""


def _faulty(tmp_path, mpiexec, mode, out=("--no-ckpt",)):
    drv = tmp_path / "driver.py"
    drv.write_text(DRIVER)
    cmd = [mpiexec, "-n", "2", sys.executable, str(drv), mode, "3"] + FAST + [
        "--steps", "50", "--dist-timeout", "3", *out]
    t0 = time.monotonic()
    r = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)
    return r, time.monotonic() - t0


def test_a_hanging_rank_makes_the_others_abort_with_a_message(tmp_path, mpiexec):
    r, dt = _faulty(tmp_path, mpiexec, "hang")
    assert r.returncode != 0
    assert "no gradients from rank(s) 1 within 3 s" in r.stderr and "died or hangs" in r.stderr, r.stderr
    assert dt < 60


def test_a_dead_rank_stops_the_job(tmp_path, mpiexec):
    r, dt = _faulty(tmp_path, mpiexec, "die")
    assert r.returncode != 0 and dt < 60, r.stdout + r.stderr


def test_a_stop_request_on_one_rank_stops_all_after_the_same_step(tmp_path, mpiexec):
    r, dt = _faulty(tmp_path, mpiexec, "sigint", ("--ckpt-dir", str(tmp_path / "run")))
    assert r.returncode == 130, r.stdout + r.stderr
    assert "interrupted at step 3" in r.stdout and "died or hangs" not in r.stderr
    assert json.loads((tmp_path / "run" / "latest.json").read_text())["step"] == 3


def test_ctrl_c_on_mpiexec_stops_every_rank_after_rank_0_checkpoints(tmp_path, mpiexec):
    run, log = tmp_path / "run", tmp_path / "steps.jsonl"
    p = subprocess.Popen([mpiexec, "-n", "2", sys.executable, "-m", "orion.cli.train"] + FAST +
                         ["--steps", "100000", "--ckpt-dir", str(run), "--log-jsonl", str(log)],
                         env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not log.exists() or len(log.read_text().splitlines()) < 3):
            time.sleep(0.2)
        assert p.poll() is None
        p.send_signal(signal.SIGINT)                  # what Ctrl-C in the launcher's terminal sends
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, out + err
    assert "interrupted at step" in out
    steps = len(log.read_text().splitlines())         # rank 0 alone logs
    latest = json.loads((run / "latest.json").read_text())
    assert latest["step"] in (steps, steps + 1)     # the signal may land between a step and its log line
    _train(["--steps", str(steps + 1), "--resume", str(run)], 2, mpiexec)


def test_ranks_that_would_train_different_things_are_refused(tmp_path, mpiexec):
    """MPMD launch (rank 0 and rank 1 with different --seed, hence other initial weights and data order),
    through the `orion` command itself: every rank names the difference and the job ends with status 1."""
    cmd = [sys.executable, "-m", "orion.cli", "train"] + FAST + ["--steps", "2", "--no-ckpt"]
    r = subprocess.run([mpiexec, "-n", "1"] + cmd + ["--seed", "1", ":", "-n", "1"] + cmd + ["--seed", "2"],
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert "MPI rank 1 does not start where rank 0 does (weights, data, train differ)" in r.stderr, r.stderr
