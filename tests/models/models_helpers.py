"""Helpers for the model tests: tiny random models, the real data files, fp16 tolerances."""

from __future__ import annotations

import os

import numpy as np
import pytest

from orion.models import GPT2Config, LlamaConfig
from orion.models.testing import random_weights

HERE = os.path.dirname(os.path.abspath(__file__))
_DATA_CANDIDATES = [os.path.join(HERE, "..", "..", "..", "shared", "data"), "/work/shared/data"]
DATA = next((os.path.abspath(p) for p in _DATA_CANDIDATES if os.path.isdir(p)), None)

# Logit tolerance against the float64 reference (computed with the same fp16-rounded weights):
# |got - ref| <= LOGIT_RTOL * max|ref| + 1e-3, i.e. ~8 fp16 ulps of the largest logit. Each layer
# chains ~15 fp16 roundings (norm, 3 convs, attention softmax, GELU/SiLU, residual adds); the residual
# stream and K/V cross program boundaries as fp16.
LOGIT_RTOL = 8 * 2.0 ** -10


def data_file(name: str) -> str:
    if DATA is None or not os.path.exists(os.path.join(DATA, name)):
        pytest.skip(f"shared data file {name} not found (looked in {_DATA_CANDIDATES})")
    return os.path.join(DATA, name)


def assert_logits_close(got, ref, rtol=LOGIT_RTOL, what=""):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    bound = rtol * np.abs(ref).max() + 1e-3
    err = np.abs(got - ref).max()
    assert err <= bound, f"{what}: max |logit error| {err:.4g} > {bound:.4g} (max |ref| {np.abs(ref).max():.3g})"
    return err


def tiny_gpt2(**kw) -> GPT2Config:
    base = dict(vocab_size=384, n_ctx=64, d_model=64, n_layers=2, n_heads=4, d_ff=256)
    base.update(kw)
    return GPT2Config(**base)


def tiny_llama(**kw) -> LlamaConfig:
    base = dict(vocab_size=384, n_ctx=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=172,
                tie_embeddings=False)
    base.update(kw)
    return LlamaConfig(**base)


def weights16(cfg, seed=0, std=0.08):
    """Random canonical weights rounded to fp16 (what the programs hold); the reference gets the same."""
    return {k: v.astype(np.float16) for k, v in random_weights(cfg, seed=seed, std=std).items()}
