"""The training forward programs and the inference stages are one decoder definition (models/llama.py): for
every family feature, the training ``attn_fwd`` / ``ffn_fwd`` graphs and the inference stage graphs of the
same layer, evaluated in float64 on the same input, give the same q, k, v, sublayer outputs - with the
residual scale too (a feature or fix landing in one view only, as the fp16 residual-scale placement once
did, fails here). The float64 training tape (np_reference.py) and the transformers fixtures stay the
independent oracles of both."""

from __future__ import annotations

import numpy as np
import pytest

from test_gradients import FEATURES
from train_helpers import lively_params, micro_config
from orion.ir import evaluate
from orion.models import llama
from orion.models.feeds import additive_mask
from orion.models.fp16_safety import Fp16Plan
from orion.train.programs import attn_variant, build_graph, layer_weights

S = 16


def _stage(cfg, p, stage, part, fp, **inputs):
    g = llama.stage_graph(cfg, p, stage, S, S, fp16=fp, part=part)
    return evaluate(g, inputs)


@pytest.mark.parametrize("scale", [1.0, 0.25])
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_training_forward_equals_the_inference_stages(feature, scale):
    cfg = micro_config(seq_len=S, **FEATURES[feature])
    p = lively_params(cfg)
    fp = Fp16Plan(scale=scale, stable_norms=True)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, cfg.d_model, 1, S)) * scale       # the stream carries the scale
    for layer in range(cfg.n_layers):
        att = evaluate(build_graph("attn_fwd", cfg, S, layer_weights("attn_fwd", p, layer), layer=layer,
                                   residual_scale=scale), {"x": x})
        ffn = evaluate(build_graph("ffn_fwd", cfg, S, layer_weights("ffn_fwd", p, layer), layer=layer,
                                   residual_scale=scale), {"x": x})
        cos, sin = llama.rope_tables(cfg, np.arange(S), layer)
        qkv = _stage(cfg, p, layer, "qkv" if layer else None, fp, x=x, cos=cos, sin=sin)
        for name in ("q", "k", "v"):
            np.testing.assert_allclose(att[name], qkv[name], rtol=1e-12, atol=1e-12, err_msg=f"{name} of {layer}")
        window = attn_variant(cfg, layer)[0]
        mask = additive_mask(S, S, 0, S, window, dtype=np.float64)
        mid = _stage(cfg, p, layer + 1, "attn", fp, x=x, q_attn=qkv["q"], k_cache=qkv["k"], v_cache=qkv["v"],
                     mask=mask)["x_mid"]
        out = _stage(cfg, p, layer + 1, "ffn", fp, x=x)
        ffn_out = out.get("x_out")          # None at the last stage (it outputs the final norm)
        if cfg.sandwich_norms:          # the post-norms run on the host in training: compare before them
            continue
        # the stage adds the sublayer output (carrying the scale) to the stream
        np.testing.assert_allclose(mid - x, att["o"], rtol=1e-9, atol=1e-9 * scale, err_msg=f"o of {layer}")
        if ffn_out is not None:
            np.testing.assert_allclose(ffn_out - x, ffn["f"], rtol=1e-9, atol=1e-9 * scale, err_msg=f"f of {layer}")
