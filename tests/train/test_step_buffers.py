"""The training step's programs write into output surfaces of their own, reused at every step
(LayerPrograms.run(..., buffers=key)): the outputs are bit for bit those of a plain run, the step's
gradients are bit for bit those of the step on fresh arrays, and the backward's ring of two surfaces is
never overwritten while the weight-gradient worker still reads it."""

from __future__ import annotations

import time

import numpy as np
import pytest
from orion.train.programs import KINDS, LayerPrograms
from orion.train.step import GradAccumulator, StepEngine, zero_grads
from train_helpers import lively_params, micro_config

S = 256                    # with d 128: every program's tensors map 1:1 onto its surfaces (no padding, widening)


def _inputs(cfg, kind, rng):
    d, h = cfg.d_model, cfg.d_ff
    act = {"attn_fwd": {"x": d}, "ffn_fwd": {"x": d}, "attn_bwd": {"dout": d, "q": d, "k": d, "v": d},
           "ffn_bwd": {"df": d, "h1": h, "h3": h}}[kind]
    # fp32 activations from the host, fp16 ones as the forward programs hand them to the backward
    return {n: (rng.standard_normal((1, c, 1, S)).astype(np.float16 if n in "qkvh1h3" else np.float32))
            for n, c in act.items()}


def _bits(a):
    return np.ascontiguousarray(a).view(np.uint16 if a.dtype == np.float16 else np.uint32)


def test_buffered_outputs_are_the_plain_run_bit_for_bit_in_reused_surfaces():
    cfg = micro_config(seq_len=S, dim=128)
    progs = LayerPrograms(cfg, S, lively_params(cfg), "dynamic", "sim")
    rng = np.random.default_rng(0)
    try:
        for kind in KINDS:
            for layer in range(cfg.n_layers):
                inp = _inputs(cfg, kind, rng)
                plain = progs.run(kind, layer, **inp)
                first = progs.run(kind, layer, buffers=(layer, 0), **inp)
                assert set(first) == set(plain)
                for name in plain:
                    assert first[name].dtype == plain[name].dtype and first[name].shape == plain[name].shape
                    assert np.array_equal(_bits(first[name]), _bits(plain[name])), (kind, layer, name)
                other = progs.run(kind, layer, buffers=(layer, 1), **inp)
                again = progs.run(kind, layer, buffers=(layer, 0), **_inputs(cfg, kind, rng))
                for name in plain:     # the same key: the same memory, rewritten; another key: its own
                    assert np.shares_memory(again[name], first[name])
                    assert not np.shares_memory(other[name], first[name])
    finally:
        progs.release()


def _step_grads(cfg, params, tokens, buffered: bool, slow_worker: bool = False):
    progs = LayerPrograms(cfg, S, params, "dynamic", "sim")
    if not buffered:                              # the plain run: fresh output arrays at every eval
        run = progs.run
        progs.run = lambda kind, layer, buffers=None, **inputs: run(kind, layer, **inputs)
    eng = StepEngine(cfg, progs, params)
    grads = GradAccumulator(zero_grads(params))
    if slow_worker:                               # the dW worker lags layers behind the backward programs
        mm = grads.mm

        def slow_mm(name, a, b):
            time.sleep(0.01)
            mm(name, a, b)
        grads.mm = slow_mm
    try:
        losses = []
        for _ in range(2):                        # the second step reuses the first step's surfaces
            grads.start()
            res = eng.microbatch(tokens[:, :-1], tokens[:, 1:], grads, 1.0)
            grads.finish()
            losses.append(res.loss_sum)
        assert buffered == any(b is not None for b in progs._bound_io.values())
        return losses, {k: g.copy() for k, g in grads.items()}
    finally:
        eng.close()
        progs.release()


@pytest.mark.parametrize("slow_worker", [False, True])
def test_step_on_reused_surfaces_gives_the_same_gradients_bit_for_bit(slow_worker):
    cfg = micro_config(seq_len=S, dim=128, n_layers=5)     # 5 layers: the backward's ring of two is reused twice
    params = lively_params(cfg)
    tokens = np.random.default_rng(3).integers(0, cfg.vocab_size, (2, S + 1))   # 2 rows: one surface set each
    ref_losses, ref = _step_grads(cfg, params, tokens, buffered=False)
    losses, got = _step_grads(cfg, params, tokens, buffered=True, slow_worker=slow_worker)
    assert losses == ref_losses
    for name in ref:
        assert np.array_equal(_bits(got[name]), _bits(ref[name])), name
