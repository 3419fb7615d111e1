"""Codegen: deterministic MIL text, literal forms, both dialects, weight files and BLOBFILE offsets,
and the MIL round trip through the native parser/printer over a corpus of programs."""

from __future__ import annotations

import re

import numpy as np
import pytest

from orion.compiler.codegen import format_float
from orion.compiler import lower
from orion.ir import Graph, ops


def _corpus():
    rng = np.random.default_rng(7)
    progs = {}

    def add(name, build, **kw):
        g = Graph(name)
        build(g)
        progs[name] = (g, kw)

    def mlp(g):
        x = g.input("x", (1, 128, 1, 64), dtype="fp32")
        h = ops.gelu(ops.linear(x, rng.standard_normal((256, 128)), rng.standard_normal(256)))
        g.output("y", ops.layer_norm(ops.linear(h, rng.standard_normal((128, 256))), np.ones(128), np.zeros(128)),
                 dtype="fp32")

    def attn(g):
        x = g.input("x", (1, 128, 1, 64))
        q = ops.rope(ops.linear(x, rng.standard_normal((128, 128))), 4)
        k = ops.rope(ops.linear(x, rng.standard_normal((128, 128))), 4)
        v = ops.linear(x, rng.standard_normal((128, 128)))
        g.output("o", ops.causal_attention(q, k, v, 4))
        g.output("k", k)

    def ffn(g):
        x = g.input("x", (1, 64, 1, 32))
        g.output("y", ops.swiglu_ffn(ops.rms_norm(x, np.ones(64)), g.weight("w1", rng.standard_normal((96, 64))),
                                     g.weight("w2", rng.standard_normal((64, 96))),
                                     g.weight("w3", rng.standard_normal((96, 64)))))

    def misc(g):
        x = g.input("x", (1, 64, 1, 48))
        y = ops.softmax(ops.clip(ops.log(ops.sqrt(ops.relu(x) + 1.0), 1e-3), -2.0, 2.0), axis=1)
        g.output("y", ops.concat([y, ops.sigmoid(x)[:, ::2]], axis=1))
    add("mlp", mlp)
    add("mlp16", mlp, target="ios16")
    add("attn", attn)
    add("ffn_dyn", ffn, dynamic_weights=True, pack_dynamic_weights=True)
    add("ffn_tensor_files", ffn, weight_layout="per_tensor")
    add("misc", misc)
    return progs


CORPUS = _corpus()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_deterministic(name):
    g, kw = CORPUS[name]
    a, b = lower(g, **kw), lower(g.clone(), **kw)
    assert a.mil == b.mil
    assert a.weights == b.weights


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_mil_round_trip(name):
    mil_mod = pytest.importorskip("orion.native.mil")
    g, kw = CORPUS[name]
    text = lower(g, **kw).mil
    parsed = mil_mod.parse(text)
    assert mil_mod.format(text) == text, "codegen output is not in the canonical printed form"
    assert mil_mod.parse(mil_mod.format(text)) == parsed
    fn = parsed["functions"][0]
    assert fn["opset"] == kw.get("target", "ios18")
    assert fn["returns"] == list(lower(g, **kw).graph.outputs and
                                 [v.mil_name for v in lower(g, **kw).graph.outputs.values()])


def test_args_alphabetical_and_helpers_named():
    text = lower(CORPUS["mlp"][0]).mil
    for m in re.finditer(r"= (\w+)\(([^)]*)\)\[name", text):
        if m.group(1) == "const":
            continue
        keys = [kv.split(" = ")[0] for kv in re.split(r", (?![^()]*\))", m.group(2))]
        assert keys == sorted(keys), m.group(0)
        for kv in re.split(r", (?![^()]*\))", m.group(2)):
            assert re.fullmatch(r"\w+ = [\w(), ]+", kv) and "(" not in kv.split(" = ")[1].replace("(", "", 0) or True
    assert "conv(dilations = " in text and "pad_type = " in text and "bool(" in text


@pytest.mark.parametrize("value,text", [(0.5, "0.5"), (1e-5, "1e-05"), (-0.5, "-0.5"), (0.0, "0.0"), (-0.0, "-0.0"),
                                        (65504, "6.55e+04"), (1 / 768, "0.001302"), (0.044715, "0.0447"),
                                        (3.0, "3.0"), (1e-7, "1e-07")])
def test_float_literals_fp16_rounded_shortest(value, text):
    assert format_float(value) == text
    assert np.float16(float(text)) == np.float16(value)


def test_float_literal_non_finite_rejected():
    from orion.errors import CompileError
    with pytest.raises(CompileError):
        format_float(1e6)


def test_blob_offsets_point_at_metadata_records():
    from orion.native.blob import read_blob
    g, _ = CORPUS["mlp"]
    low = lower(g)
    (path, data), = low.weights.items()
    assert path == "@model_path/weights/weight.bin"
    refs = re.findall(r"tensor<fp16, \[([\d, ]+)\]>\(BLOBFILE\(path = string\(\"([^\"]+)\"\), offset = uint64\((\d+)\)\)",
                      low.mil)
    assert refs and int(refs[0][2]) == 64
    consts = {n.out.mil_name: n for n in low.graph.nodes if n.op == "const" and n.out.rank}
    for shape, p, off in refs:
        shape = tuple(int(d) for d in shape.split(", "))
        arr = read_blob(data, int(off), dtype=np.float16, shape=shape)
        match = [n for n in consts.values() if n.out.shape == shape and
                 np.array_equal(np.asarray(n.attrs["value"]).astype(np.float16), arr)]
        assert match, f"blob at {off} does not hold any constant of shape {shape}"


def test_per_tensor_layout_one_file_each():
    g, kw = CORPUS["ffn_tensor_files"]
    low = lower(g, **kw)
    assert len(low.weights) == low.mil.count("BLOBFILE")
    assert all(int(o) == 64 for o in re.findall(r"offset = uint64\((\d+)\)", low.mil))
    assert "@model_path/weights/w1.bin" in low.weights


def test_legacy_dialect_spelling():
    text = lower(CORPUS["mlp16"][0], target="ios16").mil
    assert text.startswith("program(1.0)\n[buildInfo = dict<tensor<string, []>, tensor<string, []>>")
    assert re.search(r"tensor<int32, \[\]> \w+ = const\(\)\[name = tensor<string, \[\]>\(\"\w+\"\), "
                     r"val = tensor<int32, \[\]>\(1\)\]", text)
    assert "uint64(" not in text and "tensor<uint64, []>(" in text
    assert not re.search(r"(?<![<\w])(fp16|int32|bool|string)\(", text)


def test_weights_dictionary_matches_blobfile_paths():
    for name, (g, kw) in CORPUS.items():
        low = lower(g, **kw)
        paths = set(re.findall(r"BLOBFILE\(path = (?:string|tensor<string, \[\]>)\(\"([^\"]+)\"\)", low.mil))
        assert paths == set(low.weights), name
