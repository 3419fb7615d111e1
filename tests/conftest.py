"""Shared test helpers: tolerances, blob files, tiny MIL programs, a small trained base run."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared")

# fp16 has an 11-bit significand: one op rounds with relative error <= 2^-11.
FP16_EPS = 2.0 ** -10


@pytest.fixture(autouse=True)
def _no_leaked_warnings_filter():
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        yield


def fp16_close(got, ref, rtol=FP16_EPS, atol=1e-6, scale=None):
    """|got - ref| <= atol + rtol * max(|ref|, scale): fp16 tolerance against a float64 reference."""
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    bound = atol + rtol * (np.abs(ref) if scale is None else np.maximum(np.abs(ref), scale))
    err = np.abs(got - ref)
    ok = (err <= bound) | (np.isnan(ref) & np.isnan(got)) | ((ref == got) & np.isinf(ref))
    if not ok.all():
        i = np.argmax(np.where(ok, 0, err - bound))
        raise AssertionError(f"{(~ok).sum()} of {ok.size} elements out of fp16 tolerance; worst at flat index {i}: "
                             f"got {got.flat[i]!r}, ref {ref.flat[i]!r}")
    return True


@pytest.fixture(autouse=True, scope="session")
def _unlimited_sim_budget():
    """The suite compiles far more than the 119-compile budget of one process; tests that check the
    budget set their own limit."""
    import orion

    orion.sim.set_compile_budget(10**9)
    yield


# `orion train` flags of the tests' quick runs: the micro preset, short sequences, no progress bar.
TRAIN_FAST = ["--preset", "micro", "--batch", "2", "--no-progress", "--seq-len", "64", "--warmup", "2"]


@pytest.fixture(scope="session")
def micro_base_run(tmp_path_factory) -> str:
    """The checkpoint folder of a 2-step ``orion train --preset micro`` run: the base the LoRA and QLoRA CLI
    tests train adapters on (``--init``), made once per session. Tests must not write into it."""
    from orion.cli.train import main

    base = str(tmp_path_factory.mktemp("micro-base") / "base")
    assert main(TRAIN_FAST + ["--steps", "2", "--ckpt-dir", base, "--sample-tokens", "0"]) == 0
    return base
