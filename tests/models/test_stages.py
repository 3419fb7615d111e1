"""models/stages.py: a cache input the runtime cannot view in place (not an fp16 [1, C, H, >=T] block)
falls back to a host copy passed with every call; a stage with its weights as inputs (LayerStage) computes
what the baked stage computes."""

from types import SimpleNamespace

import numpy as np

from orion.models.stages import Stage, cache_viewable


def test_a_cache_that_cannot_be_viewed_in_place_is_kept_on_the_host():
    b = SimpleNamespace(kind="activation", mil_dtype="fp32", shape=(1, 4, 1, 8), mil_shape=(1, 4, 1, 8),
                        mil_name="k_cache")
    cp = SimpleNamespace(program=None, io_plan=SimpleNamespace(inputs={"k_cache": b}, outputs={}))
    assert not cache_viewable(b)
    st = Stage(cp)
    assert st.cache["k_cache"].shape == (4, 8) and st.cache["k_cache"].dtype == np.float16
    assert not st.zero_copy and not st.views


def test_a_stage_no_split_fits_takes_its_weights_as_inputs_and_computes_what_the_baked_stage_does(monkeypatch):
    """When no split of a stage passes C18 the engine compiles it with its weights as inputs (a LayerStage of
    its own: one kv_cache, bound or held on the host and copied in, its norm vector fed before each eval): same logits and tokens as baked."""
    import os

    from orion.models import engine as engine_mod
    from orion.models import load
    from orion.models.stages import LayerStage
    fx = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "qwen3")
    ids = [3, 4, 5, 6, 7, 8]
    baked = load(fx, layers="baked")
    want = (baked.logits(ids), baked.generate(ids, max_tokens=4, stop_tokens=[]).tokens)
    real = engine_mod.Engine._split_of

    def last_fits_no_split(self, i, S, T, **extra):
        return engine_mod.AS_INPUTS if i == self.fam.n_stages(self.cfg) - 1 else real(self, i, S, T, **extra)
    monkeypatch.setattr(engine_mod.Engine, "_split_of", last_fits_no_split)
    m = load(fx, layers="baked")
    got = (m.logits(ids), m.generate(ids, max_tokens=4, stop_tokens=[]).tokens)
    last = next(iter(m.engine.sets.values()))[-1]
    assert isinstance(last, LayerStage) and list(last.caches) + list(last.host_caches) == ["kv_cache"]
    assert last.weights.fed
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]
