"""Model.memory(): the bytes a loaded model holds, by kind - the host weights as held (and compressed
storage beside them), each shared layer's weight surfaces (C12-sized), the KV cache, the programs' other
surfaces, the CPU classifier's panels - next to the process's resident set, whose remainder (native plans'
weights and packed panels, the interpreter) is `other`."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from orion.models import load
from orion.models.stages import LayerStage

FX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "qwen3")
KINDS = ("weights", "layer_weight_surfaces", "kv_cache", "program_surfaces", "classifier_panels")


def test_before_anything_is_compiled_only_the_weights_count():
    m = load(FX, layers="shared")
    mem = m.memory()
    assert mem["weights"] == sum(np.asarray(a).nbytes for a in m.weights.values()) > 0
    assert all(mem[k] == 0 for k in KINDS[1:]) and mem["counted"] == mem["weights"]


@pytest.mark.parametrize("layers", ["shared", "baked"])
def test_after_a_generation_every_kind_is_counted_once(layers):
    m = load(FX, layers=layers)
    m.generate([3, 4, 5, 6], max_tokens=3)
    mem = m.memory()
    assert mem["counted"] == sum(mem[k] for k in KINDS)
    assert mem["kv_cache"] > 0 and mem["program_surfaces"] > 0 and mem["classifier_panels"] > 0
    stages = {st.layer: st for sts in m.engine.sets.values() for st in sts if isinstance(st, LayerStage)}
    # the layer surfaces are each shared layer's weights once, however many program sets bind them
    assert mem["layer_weight_surfaces"] == sum(st.surface_bytes for st in stages.values())
    assert (mem["layer_weight_surfaces"] > 0) == (layers == "shared")
    if sys.platform.startswith("linux"):
        assert mem["process_rss"] > mem["counted"] and mem["other"] == mem["process_rss"] - mem["counted"]
    assert mem == {**m.memory(), "process_rss": mem["process_rss"], "other": mem["other"]}   # counting is stable


def test_compressed_weights_report_their_storage_beside_the_fp16_values():
    m = load(FX, quantize="int8")
    mem = m.memory()
    assert 0 < mem["weights_compressed"] < mem["weights"]
