"""models/stages.py: a cache input the runtime cannot view in place (not an fp16 [1, C, H, >=T] block)
falls back to a host copy passed with every call."""

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
