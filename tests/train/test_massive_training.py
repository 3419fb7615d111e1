"""Training on bf16 checkpoints with massive activations: one projection of layer 0 reaches
2e5 / 6e5 at one trigger token (tests/fixtures/models/massive, scripts/make_massive_fixtures.py).

The forward programs take the residual scale before the projection that could overflow (``Wo(s·att)``,
``act(h1)·(s·h3)``); the host divides ``o``, ``g``, ``f`` by s. Gradients against the float64 tape
reference (np_reference.py) at the tolerance of test_gradients.py (1.5 % relative L2 per
parameter); ``orion train --init`` on such a folder trains with finite losses.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import np_reference as R
from orion.models.fp16_safety import Fp16RangeError, calibration_ids, resolve_fp16_plan
from orion.train.model import load_pretrained
from orion.train.programs import LayerPrograms
from orion.train.step import StepEngine, zero_grads

ROOT = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "massive")
N = 16                       # training window (the trigger sits at position 9)


def _setup(name):
    cfg, p = load_pretrained(os.path.join(ROOT, name))
    r = np.load(os.path.join(ROOT, name, "reference.npz"))
    ids = r["ids"].astype(np.int64)
    return cfg, p, ids[None, :N], ids[None, 1:N + 1]


def _device(cfg, p, X, Y, scale, loss_scale):
    progs = LayerPrograms(cfg, N, p, "dynamic", "sim", residual_scale=scale)
    eng = StepEngine(cfg, progs, p)
    g = zero_grads(p)
    try:
        res = eng.microbatch(X, Y, g, loss_scale / X.size)
    finally:
        eng.close()
        progs.release()
    return res, {k: v / loss_scale for k, v in g.items()}


NAMES = sorted(n for n in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, n, "reference.npz")))
# fp16 backward at a token whose one channel is 10^4-10^5 times the others: the RMSNorm backward cancels the
# gradient along that channel and the softmax backward cancels dP against its row sum (the trigger's value
# of ~1e3), so rounding of the fp16 values before them grows (measured: worst parameter 0.4-3.7 % over the
# 24 fixtures; the median parameter 0.3-1.6 %, test_gradients.py allows 1.5 %).
TOL, MEDIAN_TOL = 4e-2, 2e-2


def gradient_errors(name) -> dict:
    """Relative L2 error of every parameter's device gradient against the float64 reference on fixture
    ``name`` (a bias against its projection's gradient), with the trainer's loss-scale halving; asserts the
    step is finite and the loss matches. ``python -c "import sys; sys.path[:0] = ['tests/train'];
    import test_massive_training as t; ..."`` prints them for every fixture."""
    cfg, p, X, Y = _setup(name)
    scale = resolve_fp16_plan(cfg, p, probe_ids=X[0].tolist()).scale
    assert scale <= 2.0 ** -6
    ref_loss, ref = R.loss_and_grads(cfg, p, X, Y)
    loss_scale = 256.0 / scale            # the trainer's first loss scale, halved after each overflow as it does
    while True:                            # (the 13,000-sized weights behind the peak make large gradients)
        res, g = _device(cfg, p, X, Y, scale, loss_scale)
        assert np.isfinite(res.loss_sum)   # the forward never overflows
        finite = res.finite and all(np.isfinite(v).all() for v in g.values())   # as the optimizer checks
        if finite or loss_scale < 2 ** -4:
            break
        loss_scale /= 2
    assert finite
    assert abs(res.loss_sum / res.n_tokens - ref_loss) < 2e-3 * ref_loss
    errs = {}
    for k in ref:
        # a bias's gradient is measured against its projection's (qwen2: the key bias's own is ~0.05 of it)
        nrm = np.linalg.norm(ref[k.replace(".b", ".w")] if k.split(".")[-1] in ("bq", "bk", "bv") else ref[k])
        assert nrm > 0, k
        errs[k] = float(np.linalg.norm(g[k] - ref[k]) / nrm)
    return errs


@pytest.mark.parametrize("name", NAMES)
def test_gradients_equal_the_float64_reference(name):
    errs = gradient_errors(name)
    for k, e in errs.items():
        assert e < TOL, f"{k}: relative gradient error {e:.3g}"
    assert np.median(list(errs.values())) < MEDIAN_TOL


def test_a_scale_too_large_for_the_peak_is_a_typed_error_naming_the_layer():
    cfg, p, X, Y = _setup("llama3_mlp_6e5")
    with pytest.raises(Fp16RangeError, match=r"^layer 0: the MLP output .*--residual-scale") as e:
        _device(cfg, p, X, Y, 1.0, 256.0)
    assert e.value.layer == 0


def test_orion_train_init_on_a_massive_checkpoint(tmp_path, capsys):
    from orion.cli.train import main
    from orion.models import load
    folder = os.path.join(ROOT, "qwen3_mlp_6e5")
    r = np.load(os.path.join(folder, "reference.npz"))
    tok = load(folder, device="sim").tokenizer
    text = tok.decode(r["ids"].tolist())                            # holds the trigger token
    assert int(r["trigger"]) in tok.encode(text)
    (tmp_path / "data.txt").write_text((text + "\n") * 40)
    run = tmp_path / "run"
    assert main(["--model", folder, "--data", str(tmp_path / "data.txt"), "--steps", "3", "--batch", "1",
                 "--seq-len", "32", "--warmup", "1", "--no-progress", "--sample-tokens", "0", "--ckpt-dir",
                 str(run)]) == 0
    recs = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    losses = [x["loss"] for x in recs if "loss" in x]
    assert len(losses) >= 3 and all(np.isfinite(losses))
    state = json.loads(next(run.glob("step-*/state.json")).read_text())
    assert state["residual_scale"] <= 2.0 ** -8
    assert calibration_ids(load_pretrained(folder)[0], tok)     # the probe the trainer adds the data to
