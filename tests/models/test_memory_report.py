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
from orion.quant import QuantizedArray

FX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "models", "qwen3")
KINDS = ("weights", "layer_weight_surfaces", "layer_weights_streamed", "kv_cache", "program_surfaces",
         "classifier_panels")
COUNTED = ("weights_resident",) + KINDS[1:]


def test_before_anything_is_compiled_only_the_weights_count():
    m = load(FX, layers="shared")
    mem = m.memory()
    assert mem["weights"] == sum(np.asarray(a).nbytes for a in m.weights.values()) > 0
    assert all(mem[k] == 0 for k in KINDS[1:]) and mem["counted"] == mem["weights_resident"] <= mem["weights"]


@pytest.mark.parametrize("layers", ["shared", "baked"])
def test_after_a_generation_every_kind_is_counted_once(layers):
    m = load(FX, layers=layers)
    m.generate([3, 4, 5, 6], max_tokens=3)
    mem = m.memory()
    assert mem["counted"] == sum(mem[k] for k in COUNTED)
    assert mem["kv_cache"] > 0 and mem["program_surfaces"] > 0 and mem["classifier_panels"] > 0
    stages = {st.layer: st for sts in m.engine.sets.values() for st in sts if isinstance(st, LayerStage)}
    # the layer surfaces are each shared layer's weights once, however many program sets bind them
    assert mem["layer_weight_surfaces"] == sum(st.surface_bytes for st in stages.values())
    assert (mem["layer_weight_surfaces"] > 0) == (layers == "shared")
    if sys.platform.startswith("linux"):
        assert mem["process_rss"] > mem["counted"] and mem["other"] == mem["process_rss"] - mem["counted"]
    assert mem == {**m.memory(), "process_rss": mem["process_rss"], "other": mem["other"]}   # counting is stable


def test_compressed_weights_report_their_storage():
    m = load(FX, quantize="int8")
    mem = m.memory()
    assert 0 < mem["weights_compressed"] < mem["weights"]


# -- compressed weights stay compressed on the host -------------------------------------------------

def test_a_compressed_weight_is_held_at_its_compressed_size_and_reads_as_its_ops_values():
    m = load(FX, quantize="int8")
    q = [a for a in m.weights.values() if isinstance(a, QuantizedArray)]
    assert q and not any(isinstance(a, np.ndarray) for a in q)          # no fp16 buffer behind it
    w = q[0]
    assert w.nbytes == w.quant.nbytes < w.size * 2
    assert np.array_equal(np.asarray(w).view(np.uint16), w.quant.dequantize().view(np.uint16))
    mem = m.memory()
    kept = sum(a.nbytes for a in m.weights.values() if not isinstance(a, QuantizedArray))
    assert mem["weights_compressed"] == sum(a.quant.nbytes for a in q)
    assert mem["weights"] == kept + mem["weights_compressed"]          # int8 storage + the fp16 kept, nothing more


@pytest.mark.parametrize("layers", ["baked", "shared"])
def test_programs_keep_no_decoded_copy_of_a_compressed_weight(layers):
    """The graphs kept for recompiles (every program's source, one per program set) hold compressed weights
    as their operands, not a decoded fp16 copy each."""
    m = load(FX, quantize="int8", layers=layers)
    m.generate([3, 4, 5, 6], max_tokens=3)
    consts = [n for sts in m.engine.sets.values() for st in sts for cp in st.programs if cp._source is not None
              for n in cp._source.nodes if n.op == "const" and n.attrs.get("quant") is not None]
    assert consts and not any(isinstance(n.attrs["value"], np.ndarray) for n in consts)


@pytest.mark.parametrize("layers", ["baked", "shared"])
def test_a_quantized_model_holds_no_resident_copy_of_its_weights(tmp_path, layers):
    """The fp16 tensors a quantized model keeps (embedding, norms) stay views of the weight cache's mapped
    file, its compressed weights views of the compressed-weight cache's - no anonymous copy of either -
    and neither is resident once the programs hold the weights (the pages generation touches aside)."""
    from deep_models import make_deep
    from orion.models import host_pages
    from orion.quant.store import tensor_arrays
    path = make_deep("qwen3", str(tmp_path / "deep"))
    load(path, cache=str(tmp_path))                                    # writes the cache entry
    q = load(path, cache=str(tmp_path), quantize="int8", layers=layers)
    assert q.weights["tok_emb"].base is not None                       # a view of the mapped cache file
    compressed = [a for a in q.weights.values() if isinstance(a, QuantizedArray)]
    assert compressed and all(host_pages.map_of(p) is not None for a in compressed for p in tensor_arrays(a.quant))
    q.generate([3, 4, 5, 6], max_tokens=3)
    mem = q.memory()
    assert mem["weights_compressed"] > 64 * 4096
    assert mem["weights_resident"] < 64 * 4096


# -- the memory plan (orion info --model), known before generating --------------------------------------

@pytest.mark.parametrize("layers,quantize,ratio", [("shared", None, None), ("shared", "int8", 1), ("shared", None, 1),
                                                  ("baked", "int8", None)])
def test_the_plan_before_generating_is_what_a_generation_of_that_size_counts(layers, quantize, ratio, monkeypatch):
    from orion.models import stages as stages_mod
    from orion.models.memory import memory_plan
    if ratio:                                                # caches held on the host and copied in
        monkeypatch.setattr(stages_mod, "CACHE_COPY_RATIO", ratio)
    m = load(FX, layers=layers, quantize=quantize)
    plan = memory_plan(m, n_prompt=20, n_new=6)
    assert m.engine.compiles == 0                                      # lowering only
    assert set(plan["estimated"]) == {"weights_resident", "layer_weight_surfaces", "layer_weights_streamed", "kv_cache",
                                      "program_surfaces"}
    m.generate(list(range(3, 23)), max_tokens=6, stop_tokens=[])
    mem = m.memory()
    assert {k: plan[k] for k in KINDS + ("weights_compressed",)} == {k: mem[k] for k in KINDS + ("weights_compressed",)}
    # the plan counts none of the mapped weights' pages; a generation touches the embedding rows it reads
    touched = mem["weights_resident"] - plan["weights_resident"]
    assert 0 <= touched <= 32 * 4096 and mem["counted"] - plan["counted"] == touched


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_a_plan_for_an_impossible_prompt_is_an_input_error(bad):
    from orion.errors import InputError
    from orion.models.memory import memory_plan
    with pytest.raises(InputError, match="n_prompt must be an int"):
        memory_plan(load(FX), n_prompt=bad)


def test_info_prints_the_memory_plan_by_kind(capsys):
    from orion.cli import main
    assert main(["info", "--model", FX, "--quantize", "int8"]) == 0
    out = capsys.readouterr().out
    assert "memory by kind" in out and "of them compressed" in out and "KV cache: ~" in out
    assert "CPU classifier panels:" in out and "not planned" in out


@pytest.mark.parametrize("bound", [False, True])
def test_program_sets_of_one_bucket_share_each_layers_cache(bound, monkeypatch):
    """Prefill (S=64) and decode (S=16) of one context bucket lay the caches out alike: each shared layer has
    one cache for both - a surface bound per layer, or a host array copied in -
    and Model.memory() counts it once; the text stays correct (the shared-vs-baked bit-for-bit tests pin the
    tokens)."""
    from orion.models import stages as stages_mod
    monkeypatch.setattr(stages_mod, "CACHE_COPY_RATIO", 10**9 if bound else 1)     # never / always copied in
    m = load(FX, layers="shared")
    m.generate(list(range(3, 40)), max_tokens=3)                   # a 37-token prefill, then decode steps
    sets = {k: [st for st in sts if isinstance(st, LayerStage)] for k, sts in m.engine.sets.items()}
    assert len(sets) == 2
    a, b = sets.values()

    def held(st) -> dict:
        return st.caches if bound else st.host_caches

    for x, y in zip(a, b):
        assert x.layer == y.layer and held(x).keys() == held(y).keys() and held(x)
        assert all(held(x)[n] is held(y)[n] for n in held(x))
    size = (lambda s: s.alloc_size) if bound else (lambda s: s.nbytes)
    distinct = {id(s): size(s) for sts in sets.values() for st in sts for s in held(st).values()}
    assert sum(distinct.values()) == sum(size(s) for st in a for s in held(st).values()) > 0


def test_weights_read_from_the_cache_stay_resident_only_while_programs_are_built(tmp_path):
    """Weights from the weight cache are views of its mapped file: once the programs hold them (surfaces,
    baked programs, the classifier's panels) the engine gives their pages back to the OS; Model.memory()
    says what stays resident, and a view touched again reads the same values."""
    from deep_models import make_deep
    from orion.models import host_pages
    path = make_deep("qwen3", str(tmp_path / "deep"))               # 36 layers: pages enough to see
    load(path, cache=str(tmp_path))                                 # the first load writes the cache entry
    m = load(path, layers="shared", cache=str(tmp_path))
    maps = host_pages.file_maps(m.weights.values())
    assert maps, "the fixture's weights come from the cache's mapped file"
    before = {k: np.array(v) for k, v in m.weights.items()}
    m.generate([3, 4, 5, 6], max_tokens=3)
    mem = m.memory()
    if sys.platform.startswith("linux"):
        assert mem["weights_resident"] < mem["weights"] / 4
    assert all(np.array_equal(np.asarray(m.weights[k]), v) for k, v in before.items())
    first = m.generate([3, 4, 5, 6], max_tokens=3).tokens
    assert first == m.generate([3, 4, 5, 6], max_tokens=3).tokens


def test_programs_with_weights_as_inputs_keep_no_host_copy_of_them():
    """A shared layer program's weights are each layer's, in that layer's surfaces: the program keeps no
    compile-time values, no last-staged copies and no source graph (get_weight and save say why)."""
    from orion.errors import ProgramStateError
    m = load(FX, layers="shared")
    m.generate([3, 4, 5, 6], max_tokens=3)
    shared = [st.base.cp for sts in m.engine.sets.values() for st in sts if isinstance(st, LayerStage)]
    assert shared
    for cp in shared:
        assert cp._source is None and not cp._dynamic
        assert all(dw.initial is None for dw in cp.io_plan.dynamic.values())
        with pytest.raises(ProgramStateError, match="drop_host_weights"):
            cp.get_weight(next(iter(cp.io_plan.dynamic)))


# -- what C12 pads in a shared layer program, and what capturing a layer leaves behind ------------------

def test_a_shared_layer_binds_one_cache_surface_and_no_surface_for_its_vectors(monkeypatch):
    """C12 allocates every input of a program at the largest one's size - for a shared layer program a
    weight's. So each layer binds ONE cache surface (keys, then values, on axis 1; the engine writes both
    through views of it) where its cache is not copied in from the host (as here, forced:
    tests/models/test_shared_inputs.py has the other way), and none for its norm vectors (a few
    bytes, written into the program's own input before each eval); Model.memory() counts exactly that."""
    from orion.models import stages as stages_mod
    monkeypatch.setattr(stages_mod, "CACHE_COPY_RATIO", 10**9)
    m = load(FX, layers="shared")
    m.generate([3, 4, 5, 6], max_tokens=3)
    eng = m.engine
    stages = [st for sts in eng.sets.values() for st in sts if isinstance(st, LayerStage)]
    assert stages
    for st in stages:
        (surf,) = st.caches.values()
        whole = surf.view("uint8")
        k, v = st.cache["k_cache"], st.cache["v_cache"]
        assert np.shares_memory(k, whole) and np.shares_memory(v, whole) and not np.shares_memory(k, v)
        assert np.array_equal(k[:, :eng.pos], eng.k_host[st.layer - 1, :, :eng.pos])
        assert np.array_equal(v[:, :eng.pos], eng.v_host[st.layer - 1, :, :eng.pos])
        fed = st.weights.fed
        assert "packed_vectors" in fed and not set(fed) & set(st.weights.surfaces)
        assert all(16 * a.nbytes <= surf.alloc_size for a in fed.values())
    layers = {st.layer: st for st in stages}
    assert len({id(s) for st in stages for s in st.caches.values()}) == len(layers)     # one per layer, both sets
    assert m.memory()["layer_weight_surfaces"] == sum(st.surface_bytes for st in layers.values())


def test_capturing_a_shared_layer_reads_its_weights_where_they_are(tmp_path):
    """The values staged into a layer's surfaces are the host weights as held - views of the weight cache's
    mapped file - not a float32 copy of every layer's weights."""
    from deep_models import make_deep
    from orion.models import host_pages
    path = make_deep("qwen3", str(tmp_path / "deep"), layers=4)
    load(path, cache=str(tmp_path))                                 # writes the cache entry
    m = load(path, cache=str(tmp_path), layers="shared")
    values = m.engine._layer_weights(1, 16, 64)
    assert values and all(host_pages.map_of(a) is not None for a in values.values())


def test_a_layers_decoded_weights_are_freed_with_their_last_use():
    """A compressed layer's weights are decoded to be staged; once staged nothing keeps them - not the graph
    they were read off, whose node/value cycle only the garbage collector would free."""
    import gc
    import weakref

    def owner(a):
        while isinstance(a.base, np.ndarray):
            a = a.base
        return a
    m = load(FX, quantize="int8", layers="shared")
    gc.disable()
    try:
        values = m.engine._layer_weights(1, 16, 64)
        refs = [weakref.ref(owner(a)) for n, a in values.items() if n in ("wq", "wk", "wv", "wo", "w1", "w2", "w3")]
        del values
        assert refs and all(r() is None for r in refs)
    finally:
        gc.enable()


def test_program_sets_of_one_bucket_allocate_the_layer_weights_once():
    """A second program set of the same layout stages each layer into a spare surface, finds the bytes of the
    first set's and keeps those: the layers' surfaces are the same objects in both sets and no spare outlives
    the set."""
    m = load(FX, layers="shared")
    m.generate(list(range(3, 40)), max_tokens=3)                   # prefill (S=64) and decode (S=16) sets
    sets = [[st for st in sts if isinstance(st, LayerStage)] for sts in m.engine.sets.values()]
    assert len(sets) == 2
    for a, b in zip(*sets):
        assert all(a.weights.surfaces[n] is b.weights.surfaces[n] for n in a.weights.surfaces)
        assert not a.base.spare_surfaces and not b.base.spare_surfaces
