"""Random models for tests and benchmarks (canonical weights, GPT-2-like initialisation)."""

from __future__ import annotations

import numpy as np

from .loaders import expected_shapes

__all__ = ["random_weights"]


def random_weights(cfg, seed: int = 0, std: float = 0.02, dtype=np.float32) -> dict:
    """Canonical weights drawn like GPT-2's init: matrices N(0, std) (output projections scaled by
    1/sqrt(2L)), norm gains around 1, biases small."""
    rng = np.random.default_rng(seed)
    out = {}
    resid = std / np.sqrt(2 * cfg.n_layers)
    for name, shape in expected_shapes(cfg).items():
        key = name.rsplit(".", 1)[-1]
        if name.endswith((".g", "rms_att", "rms_ffn", "rms_final")) or name == "ln_f.g":
            a = 1.0 + 0.1 * rng.standard_normal(shape)
        elif len(shape) == 1:
            a = 0.02 * rng.standard_normal(shape)
        elif key in ("wo", "wproj", "w2"):
            a = resid * rng.standard_normal(shape)
        elif name in ("wte", "tok_emb", "wcls"):
            a = std * rng.standard_normal(shape) * 5
        else:
            a = std * rng.standard_normal(shape) * 2
        out[name] = a.astype(dtype)
    return out
