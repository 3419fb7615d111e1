"""orion.models.classifier: the CPU classifier's weight, built a block of rows at a time (the mapped weight's pages
handed back after each block, never a whole copy beside the result), as fp16 panels or int8 codes; the int8 one
gives exactly the logits of fp16 panels of its dequantized values (the same GEMM, the codes decoded in registers),
and close to the fp16 classifier's; a quantized model's engine takes it by default, and the memory report and its
estimate count its bytes."""

import os

import numpy as np
import pytest
from orion import _native
from orion.errors import InputError
from orion.models import classifier, load
from orion.models.memory import memory_plan
from orion.quant import quantize_int8

RNG = np.random.default_rng(0)
ISAS = [i for i in ("scalar", "avx2", "avx512", "neon") if _native.testing.force_isa(i)]
_native.testing.force_isa("best")


def _logits(weight, h):
    """The engine's call: fp32 logits [n, 16 ceil(V/16)] of hidden states h [d, n]."""
    return _native.gemm_panels_f16(weight, h, f32_out=True, trans_out=True)


def test_fp16_panels_are_built_block_by_block():
    V, d = 2 * classifier.BLOCK_ROWS + 37, 8
    W = RNG.standard_normal((V, d)).astype(np.float16)
    released = []
    P = classifier.fp16_panels(W, lambda: released.append(1))
    n = -(-V // 16)
    want = np.zeros((n * 16, d), np.float16)
    want[:V] = W
    assert P.shape == (n, d, 16) and P.flags.c_contiguous
    assert P.tobytes() == np.ascontiguousarray(want.reshape(n, 16, d).transpose(0, 2, 1)).tobytes()
    assert len(released) == 3
    assert classifier.held_bytes(P) == classifier.nbytes("fp16", V, d)


@pytest.mark.parametrize("V", [2 * classifier.BLOCK_ROWS + 37, 4 * 16])
@pytest.mark.parametrize("n", [1, 3, 40])
def test_int8_logits_are_those_of_its_dequantized_rows_bit_for_bit(V, n):
    d = 64
    W = (RNG.standard_normal((V, d)) * np.exp2(RNG.integers(-6, 3, (V, 1)))).astype(np.float16)
    released = []
    cw = classifier.int8_weight(W, lambda: released.append(1))
    assert len(released) == 2 * -(-V // classifier.BLOCK_ROWS)             # both passes hand pages back per block
    deq = quantize_int8(W).dequantize()                                    # the whole matrix at once: same rows
    h = RNG.standard_normal((d, n)).astype(np.float16)
    panels = classifier.fp16_panels(deq)
    for isa in ISAS:                                                       # the fused GEMVs and the decode path
        assert _native.testing.force_isa(isa)
        got, want = _logits(cw, h), _logits(panels, h)
        assert got.shape == want.shape == (n, -(-V // 16) * 16)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32), err_msg=isa)
    _native.testing.force_isa("best")
    assert not got[:, V:].any()                                            # rows past V: zero, like the panels'
    exact = h.astype(np.float64).T @ deq.astype(np.float64).T              # and the product itself, in float64
    np.testing.assert_allclose(got[:, :V], exact, rtol=1e-5, atol=1e-4 * np.abs(exact).max())
    assert classifier.held_bytes(cw) == classifier.nbytes("int8", V, d)


def test_int8_logits_stay_close_to_the_fp16_classifier():
    V, d = 512, 256
    W = (RNG.standard_normal((V, d)) * 0.05).astype(np.float16)
    h = RNG.standard_normal((d, 1)).astype(np.float16)
    z16 = _logits(classifier.fp16_panels(W), h)[0, :V]
    z8 = _logits(classifier.int8_weight(W), h)[0, :V]
    assert np.abs(z8 - z16).max() < 0.01 * np.abs(z16).max()
    assert np.argmax(z8) == np.argmax(z16)


def test_rows_are_set_only_as_whole_panels():
    cw = _native.compressed_weight("shift_scale", np.zeros(0, np.uint8), 40, 8, 8, True, 1, 1,
                                   np.zeros(0, np.float16), np.ones(40, np.float32), np.zeros(0, np.float32))
    codes = np.ones(16 * 8, np.uint8)
    for row0, rows in [(8, codes), (0, codes[:15 * 8]), (32, codes), (0, codes[:-1]), (-16, codes)]:
        with pytest.raises(ValueError):
            cw.set_rows(row0, rows)
    cw.set_rows(16, codes)
    cw.set_rows(32, codes[:8 * 8])                                          # the last rows: up to M
    out = np.zeros((1, 8, 48), np.float16)
    cw.panels_into(out, 48)
    assert (out[0, :, :16] == 0).all() and (out[0, :, 16:40] == 1).all() and (out[0, :, 40:] == 0).all()


def test_an_unknown_kind_is_refused():
    with pytest.raises(InputError, match="classifier_weights"):
        classifier.build(np.zeros((16, 4), np.float16), "int4")


# -- in a model -------------------------------------------------------------------------------------------

FX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "qwen3")


@pytest.mark.parametrize("options, kind", [({}, "fp16"), ({"quantize": "int8"}, "int8"), ({"quantize": "lut4"}, "int8"),
                                           ({"quantize": "int8", "classifier_weights": "fp16"}, "fp16")])
def test_a_quantized_model_takes_the_int8_classifier_unless_told(options, kind):
    m = load(FX, **options)
    assert m.engine.classifier_weights == kind
    plan = memory_plan(m, n_prompt=8, n_new=4)
    r = m.generate([3, 4, 5, 6], max_tokens=3)
    held = m.engine._wcls
    assert isinstance(held, np.ndarray) == (kind == "fp16")
    assert m.memory()["classifier_panels"] == plan["classifier_panels"] == classifier.held_bytes(held)
    # the logits are those of the engine's hidden state through that classifier
    h = RNG.standard_normal((m.config.d_model, 1)).astype(np.float16)
    W = m.engine.fam.classifier_weight(m.config, m.weights)
    ref = classifier.fp16_panels(quantize_int8(np.asarray(W, np.float16)).dequantize() if kind == "int8" else W)
    np.testing.assert_array_equal(m.engine._logits(h[None, :, None, :], slice(0, 1)),
                                  _logits(ref, h)[:, :m.config.vocab_size])
    assert len(r.tokens) == 3
