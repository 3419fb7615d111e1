"""Heads of 128k-152k tokens (Llama 3, Qwen, Gemma) exceed one axis (C22: 65,536) and one program's
working set: the device classifier splits the rows into chunks, each its own program, and reassembles
the logits; the CPU classifier stays an option and both must agree."""

from __future__ import annotations

import numpy as np

from orion.models import Model, reference

from models_helpers import tiny_llama, weights16


def test_a_head_beyond_65536_rows_runs_as_row_chunks():
    cfg = tiny_llama(vocab_size=70_001, d_model=16, n_heads=2, n_kv_heads=1, d_ff=32, n_layers=1)
    w = weights16(cfg)
    ids = [3, 70_000, 65_536, 12]
    dev = Model(cfg, w, device="sim", classifier="device")
    cpu = Model(cfg, w, device="sim")
    try:
        a, b = dev.logits(ids), cpu.logits(ids)
        want = reference.forward(cfg, w, ids)
        assert a.shape == b.shape == (4, 70_001)
        scale = np.abs(want).max()
        assert np.abs(a - want).max() < 0.02 * scale and np.abs(b - want).max() < 0.02 * scale
        chunks = next(iter(dev.engine.cls_sets.values()))
        assert len(chunks) == 5 and max(r1 - r0 for r0, r1, _ in chunks) <= 16_384      # default chunk
        assert chunks[0][0] == 0 and chunks[-1][1] == 70_001
    finally:
        dev.release()
        cpu.release()
