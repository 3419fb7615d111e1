"""Model._repr_html_: config summary (family, model_type, sizes), tokenizer, programs compiled so far,
fp16 plan and adapter - read without building the engine, user strings escaped."""

import numpy as np

from orion.models import GPT2Config, Model
from orion.models.testing import random_weights


def _model(name="tiny"):
    cfg = GPT2Config(n_layers=1, d_model=64, n_heads=2, d_ff=256, vocab_size=128, n_ctx=32)
    w = {k: v.astype(np.float16) for k, v in random_weights(cfg, seed=0).items()}
    return Model(cfg, w, device="sim", name=name, stop_tokens=[])


def test_html_before_any_generation_does_not_compile():
    m = _model()
    h = m._repr_html_()
    assert m._engine is None                                    # the repr built nothing
    assert "orion.models.Model" in h and "gpt2 / gpt2" in h
    assert ">64<" in h and ">128<" in h                         # d_model, vocab_size
    assert "none yet" in h and "not measured yet" in h and "none (base model)" in h
    assert "none (pass token ids" in h                          # no tokenizer


def test_html_after_generation_counts_programs_and_plan():
    m = _model()
    m.generate([1, 2, 3], max_tokens=2)
    h = m._repr_html_()
    assert f"{m.engine.compiles} compiled" in h and m.engine.compiles > 0
    assert "on sim" in h and "plain (no scaling needed)" in h
    m.release()


def test_name_is_escaped():
    h = _model("<img src=x onerror=alert(1)>")._repr_html_()
    assert "<img" not in h and "&lt;img src=x" in h
