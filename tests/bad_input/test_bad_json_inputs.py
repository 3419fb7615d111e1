"""JSON and JSON Lines from users' files through the one bounded reader of orion.fileio:
a size cap before reading, a nesting cap before parsing (Python's parser would hit RecursionError), an
undecodable byte named by its offset, a JSONL error named by file and line — every one a typed error,
never a bare RecursionError/ValueError/OverflowError, and nothing on disk changed. The bench baseline
(``orion bench --compare``) is checked whole before any benchmark runs."""

from __future__ import annotations

import json

import pytest

import orion.bench
from bad_input_helpers import run_cli, snapshot
from orion.errors import ModelFormatError
from orion.fileio import MAX_JSON_DEPTH, iter_jsonl, read_json
from orion.quant.activations import ActivationScales
from orion.train.errors import DataError




def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# (file bytes, words the error must contain)
RAW_CASES = [
    ("deep array", b"[" * 100_000, ["nested too deeply", "100000 levels"]),
    ("deep object", b'{"a":' * 5_000 + b"1" + b"}" * 5_000, ["nested too deeply", "5000 levels"]),
    ("one level past the cap", _nested(MAX_JSON_DEPTH + 1), ["nested too deeply", f"{MAX_JSON_DEPTH + 1} levels"]),
    ("binary", b'{"a": "\xff\xfe"}', ["not UTF-8", "byte 0xff", "byte offset 7"]),
    ("integer of 5000 digits", b'{"a": ' + b"9" * 5000 + b"}", ["not valid JSON", "digits"]),
    ("truncated", b'{"a": [1, 2', ["not valid JSON", "line 1"]),
]


@pytest.mark.parametrize("raw,needles", [c[1:] for c in RAW_CASES], ids=[c[0] for c in RAW_CASES])
def test_read_json_refuses(tmp_path, raw, needles):
    f = tmp_path / "config.json"
    f.write_bytes(raw)
    before = snapshot(tmp_path)
    with pytest.raises(ModelFormatError) as e:
        read_json(str(f), ModelFormatError)
    assert str(f) in str(e.value) and all(w in str(e.value) for w in needles), str(e.value)
    assert snapshot(tmp_path) == before


def test_read_json_checks_the_size_before_reading(tmp_path, monkeypatch):
    f = tmp_path / "big.json"
    f.write_text(json.dumps({"a": "x" * 200}))
    read_calls = []
    monkeypatch.setattr("builtins.open", _counting_open(read_calls))
    with pytest.raises(ModelFormatError, match=r"big.json: not valid JSON \(2\d\d bytes, more than the 100"):
        read_json(str(f), ModelFormatError, max_bytes=100)
    assert read_calls == [0]                      # opened, never read


def _counting_open(calls):
    import builtins
    real = builtins.open

    def fake(*a, **k):
        fh = real(*a, **k)
        calls.append(0)
        orig = fh.read

        def read(*ra):
            calls[-1] += 1
            return orig(*ra)
        fh.read = read
        return fh
    return fake


def test_the_depth_cap_counts_structure_not_strings(tmp_path):
    """Brackets inside strings (escaped quotes and backslashes included) are text, not nesting: a file at
    the cap with such strings parses."""
    doc = {"s": '[[[[{{{{ \\" \\\\" ]]' * 50, "t": "\\" * 7}
    inner = json.dumps(doc)
    f = tmp_path / "ok.json"
    f.write_text("[" * (MAX_JSON_DEPTH - 1) + inner + "]" * (MAX_JSON_DEPTH - 1))
    v = read_json(str(f), ModelFormatError)
    for _ in range(MAX_JSON_DEPTH - 1):
        v = v[0]
    assert v == doc


# --- activation scales (W8A8) -------------------------------------------------------------------

GOOD_SCALES = {"format": "orion.activation_scales", "version": 1, "dtype": "int8", "method": "max",
               "percentile": None, "calibration_tokens": 10, "scales": {"layers.0.wq": 0.5}}
SCALES_CASES = [
    ("deep", b'{"format": ' + b"[" * 50_000, ["activation_scales.json", "cannot read the activation scales",
                                              "nested too deeply"]),
    ("binary", b"\x00\xff\x00\xff", ["cannot read the activation scales", "byte offset 1"]),
    ("a scale beyond float range", json.dumps(dict(GOOD_SCALES, scales={"layers.0.wq": 10 ** 400})).encode(),
     ["scales['layers.0.wq']", "positive finite number"]),
]


@pytest.mark.parametrize("raw,needles", [c[1:] for c in SCALES_CASES], ids=[c[0] for c in SCALES_CASES])
def test_activation_scales_file_refused(tmp_path, raw, needles):
    (tmp_path / "activation_scales.json").write_bytes(raw)
    before = snapshot(tmp_path)
    with pytest.raises(ModelFormatError) as e:
        ActivationScales.load(str(tmp_path))
    assert all(w in str(e.value) for w in needles), str(e.value)
    assert snapshot(tmp_path) == before


def test_activation_scales_good_file_loads(tmp_path):
    (tmp_path / "activation_scales.json").write_text(json.dumps(GOOD_SCALES))
    assert ActivationScales.load(str(tmp_path)).scales == {"layers.0.wq": 0.5}


# --- JSON Lines: the training log orion plot reads -------------------------------------------------



GOOD_LINE = b'{"step": 1, "loss": 2.0, "tokens_per_s": 10.0}\n'
PLOT_CASES = [
    ("deep line", GOOD_LINE + b'{"step": 2, "loss": ' + b"[" * 100_000 + b"\n",
     ["train_log.jsonl, line 2", "nested too deeply"]),
    ("line of 2 MB", GOOD_LINE + b'{"step": 2, "note": "' + b"x" * (2 << 20) + b'"}\n',
     ["train_log.jsonl, line 2", "longer than"]),
    ("no plottable loss", b'{"step": 1, "loss": true}\n{"step": 2, "loss": ' + b"9" * 400 + b"}\n"
     b'{"step": 3, "loss": "x"}\n', ["no step records with a loss"]),
]


@pytest.mark.parametrize("raw,needles", [c[1:] for c in PLOT_CASES], ids=[c[0] for c in PLOT_CASES])
def test_orion_plot_refuses_a_bad_log(tmp_path, capsys, raw, needles):
    (tmp_path / "train_log.jsonl").write_bytes(raw)
    before = snapshot(tmp_path)
    assert run_cli(["plot", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    line = err.rstrip().splitlines()[-1]
    assert line.startswith("orion: error: ") and "Traceback" not in err
    assert all(w in line for w in needles), line
    assert snapshot(tmp_path) == before


def test_jsonl_names_the_line_and_skips_only_when_asked(tmp_path):
    f = tmp_path / "log.jsonl"
    f.write_bytes(b'{"a": 1}\n\n{"a": 2\n{"a": 3}\n')
    with pytest.raises(DataError, match=r"log.jsonl, line 3: not valid JSON"):
        list(iter_jsonl(str(f), DataError))
    assert list(iter_jsonl(str(f), DataError, skip_invalid=True)) == [(1, {"a": 1}), (4, {"a": 3})]
    f.write_bytes(b'{"a": 1}\n' + _nested(MAX_JSON_DEPTH + 1) + b"\n")
    with pytest.raises(DataError, match=r"line 2: not valid JSON \(nested too deeply"):
        list(iter_jsonl(str(f), DataError, skip_invalid=True))       # a torn line, never a deep one


# --- orion bench --compare: the baseline is checked before anything runs ---------------------------

def _metric(**kw):
    return dict({"value": 10.0, "unit": "tok/s", "better": "higher", "spread": 0.0, "samples": []}, **kw)


def _doc(**metric):
    return {"schema": "orion-bench/1", "quick": True,
            "benchmarks": {"decode": {"params": {}, "notes": [], "metrics": {"tok_s": _metric(**metric)}}}}


BASELINES = [
    ("a list", b"[1, 2]", ["not an orion bench result"]),
    ("benchmarks a list", json.dumps({"benchmarks": []}), ["no 'benchmarks' object"]),
    ("section a string", json.dumps({"benchmarks": {"decode": "fast"}}), ["benchmarks.decode must be an object"]),
    ("metrics a list", json.dumps({"benchmarks": {"decode": {"metrics": [1]}}}), ["benchmarks.decode.metrics",
                                                                                  "must be an object"]),
    ("metric a number", json.dumps({"benchmarks": {"decode": {"metrics": {"tok_s": 5}}}}),
     ["benchmarks.decode.metrics.tok_s must be an object"]),
    ("value a string", json.dumps(_doc(value="10")), ["tok_s.value must be a number", "'10'"]),
    ("value a bool", json.dumps(_doc(value=True)), ["tok_s.value must be a number", "True"]),
    ("value beyond float range", json.dumps(_doc(value=10 ** 400)), ["tok_s.value must be a number"]),
    ("better sideways", json.dumps(_doc(better="sideways")), ["tok_s.better", "'higher' or 'lower'"]),
    ("spread negative", json.dumps(_doc(spread=-0.5)), ["tok_s.spread", "finite number >= 0"]),
    ("spread NaN", json.dumps(_doc(spread=float("nan"))), ["tok_s.spread", "finite number >= 0"]),
    ("quick a string", json.dumps(dict(_doc(), quick="yes")), ["'quick' must be true or false"]),
    ("deep", b'{"benchmarks": ' + b"[" * 100_000, ["nested too deeply"]),
    ("binary", b"\x89PNG\r\n\x1a\n", ["not UTF-8", "byte offset 0"]),
]


@pytest.mark.parametrize("raw,needles", [c[1:] for c in BASELINES], ids=[c[0] for c in BASELINES])
def test_bad_baseline_fails_before_any_benchmark(tmp_path, capsys, monkeypatch, raw, needles):
    def refuse(*a, **k):
        raise AssertionError("the baseline must be refused before the benchmarks run")
    monkeypatch.setattr(orion.bench, "run", refuse)
    base = tmp_path / "base.json"
    base.write_bytes(raw if isinstance(raw, bytes) else raw.encode())
    before = snapshot(tmp_path)
    assert run_cli(["bench", "--quick", "--compare", str(base), "--json", str(tmp_path / "out.json")]) == 1
    err = capsys.readouterr().err
    line = err.rstrip().splitlines()[-1]
    assert line.startswith("orion: error: ") and "Traceback" not in err and str(base) in line
    assert all(w in line for w in needles), line
    assert snapshot(tmp_path) == before                     # no out.json either


def test_a_well_formed_baseline_reaches_the_comparison(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(orion.bench, "run", lambda *a, **k: _doc(value=5.0))
    base = tmp_path / "base.json"
    base.write_text(json.dumps(_doc()))
    assert run_cli(["bench", "--quick", "--compare", str(base)]) == 3
    assert "regression   decode.tok_s" in capsys.readouterr().out


# ---- the readers of orion's own files, which a user can still hand in corrupt ---------------------------

DEEP = b"[" * 50000 + b"]" * 50000


def test_a_deeply_nested_checkpoint_state_is_a_checkpoint_error(tmp_path):
    from orion.train import checkpoint as ck
    from orion.train.errors import CheckpointError
    (tmp_path / "state.json").write_bytes(DEEP)
    with pytest.raises(CheckpointError, match="nested too deeply"):
        ck.read_state(str(tmp_path))
    (tmp_path / "state.json").unlink()
    (tmp_path / "latest.json").write_bytes(DEEP)
    with pytest.raises(CheckpointError, match="corrupt latest.json"):
        ck.resolve(str(tmp_path))


def test_a_deeply_nested_saved_program_is_an_input_error(tmp_path):
    import orion
    (tmp_path / "program.json").write_bytes(DEEP)
    with pytest.raises(orion.errors.InputError, match="nested too deeply"):
        orion.compiler.program.load(str(tmp_path))


def test_a_deeply_nested_safetensors_header_is_a_model_format_error(tmp_path):
    import struct
    from orion.errors import ModelFormatError
    from orion.native.safetensors import SafetensorsFile
    (tmp_path / "m.safetensors").write_bytes(struct.pack("<Q", len(DEEP)) + DEEP)
    with pytest.raises(ModelFormatError, match="nested too deeply"):
        SafetensorsFile(str(tmp_path / "m.safetensors"))


def test_a_run_log_line_nested_too_deeply_is_skipped_like_a_torn_line(tmp_path):
    from orion.train.runlog import RunLog
    log = tmp_path / "train_log.jsonl"
    log.write_bytes(b'{"step": 1, "loss": 2.0}\n' + DEEP + b"\n" + b'{"step": 2, "loss": 1.5}\n')
    RunLog(str(log), 1).close()                      # resuming at step 1: the log is cut after it
    assert log.read_text().splitlines() == ['{"step": 1, "loss": 2.0}']
