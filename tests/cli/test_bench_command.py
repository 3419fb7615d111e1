"""`orion bench --quick`: runs without torch in seconds, writes the orion-bench/1 JSON (machine, commit,
per-benchmark params, notes and metrics with value/unit/direction/spread/samples), and --compare exits 3
on a regression beyond noise and 0 within it."""

import copy
import json

import pytest

from orion.bench import SCHEMA
from orion.cli import main


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    assert main(["bench", "--only", "gemm,decode", "--quick", "--no-torch", "--json", str(out)]) == 0
    return json.loads(out.read_text())


def test_schema(result):
    assert result["schema"] == SCHEMA and result["quick"] is True
    assert {"sha", "dirty"} <= set(result["commit"])
    assert {"platform", "cpus", "python", "numpy", "isa", "sim_threads"} <= set(result["machine"])
    assert set(result["benchmarks"]) == {"gemm", "decode"}
    for section in result["benchmarks"].values():
        assert {"params", "notes", "metrics"} <= set(section) and section["metrics"]
        for m in section["metrics"].values():
            assert {"value", "unit", "better", "spread", "samples"} <= set(m)
            assert m["value"] > 0 and m["better"] in ("higher", "lower") and m["spread"] >= 0
    gemm = result["benchmarks"]["gemm"]["metrics"]
    assert any(k.startswith("ratio_vs_numpy_") for k in gemm)            # the comparison side ran
    assert "orion_decode_tok_s" in result["benchmarks"]["decode"]["metrics"]
    assert not any(k.startswith("torch_") for k in result["benchmarks"]["decode"]["metrics"])


def test_quick_figures_come_from_three_fresh_processes(result):
    # --quick's tiny figures move as a whole from one process to the next: each is the median of three
    # processes' medians, with a spread at least as wide as theirs
    from orion.bench.measure import rel_spread
    for section in result["benchmarks"].values():
        assert any("fresh processes" in n for n in section["notes"])
        for m in section["metrics"].values():
            assert len(m["processes"]) == 3 and m["value"] == sorted(m["processes"])[1]
            assert m["spread"] >= rel_spread(m["processes"]) - 1e-12


def _baseline(result, tmp_path, factor, spread=0.0):
    base = copy.deepcopy(result)
    for section in base["benchmarks"].values():
        for m in section["metrics"].values():
            m["spread"] = spread
    m = base["benchmarks"]["decode"]["metrics"]["orion_decode_tok_s"]
    m["value"] *= factor
    path = tmp_path / "base.json"
    path.write_text(json.dumps(base))
    return path


def _compare_only(result, tmp_path, monkeypatch, base):
    # the comparison logic on a fixed result: the run itself is replaced by the fixture's document
    import orion.bench
    monkeypatch.setattr(orion.bench, "run", lambda *a, **k: copy.deepcopy(result))
    for section in result["benchmarks"].values():
        for m in section["metrics"].values():
            m["spread"] = 0.0
    return main(["bench", "--quick", "--compare", str(base)])


def test_compare_flags_a_two_times_slower_number(result, tmp_path, monkeypatch, capsys):
    code = _compare_only(result, tmp_path, monkeypatch, _baseline(result, tmp_path, 2.0))
    out = capsys.readouterr().out
    assert code == 3
    assert "regression   decode.orion_decode_tok_s" in out and "1 regression(s)" in out


def test_compare_within_noise_passes(result, tmp_path, monkeypatch, capsys):
    code = _compare_only(result, tmp_path, monkeypatch, _baseline(result, tmp_path, 1.05))
    assert code == 0 and "0 regression(s)" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["0", "33", "two"])
def test_a_bad_process_count_is_a_usage_error(bad, capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "--quick", "--processes", bad])
    assert e.value.code == 2 and "--processes" in capsys.readouterr().err


def test_bad_baseline_fails_before_running(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert main(["bench", "--quick", "--compare", str(bad)]) == 1
    assert "not valid JSON" in capsys.readouterr().err
