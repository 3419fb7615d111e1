"""orion.bench.compare and `orion bench --compare`: a change reads as speed (negative = slower, whatever the
unit's direction); a metric regressed only when the two runs' confidence intervals (value * (1 -+ spread/2))
do not overlap and it got slower by more than the floor; exit 3 then, naming the metric, both values and
both spreads. Results are synthetic JSON documents here: no benchmark runs."""

import json

import pytest

import orion.bench
from orion.bench import metric
from orion.bench.compare import NOISE_FLOOR, compare
from orion.cli import main
from orion.errors import InputError


def _doc(**metrics):
    return {"schema": "orion-bench/2", "quick": True,
            "benchmarks": {"train": {"metrics": metrics, "notes": [], "params": {}}}}


def _one(new, old):
    [f] = compare(_doc(m=new), _doc(m=old))
    return f


@pytest.mark.parametrize("old,new,better,text,verdict", [
    (0.0026, 0.0069, "lower", "-62.3% (2.65x slower)", "regression"),      # seconds up: slower, negative
    (1.0, 0.5, "lower", "+100.0% (2.00x faster)", "improvement"),          # seconds down: faster, positive
    (100.0, 50.0, "higher", "-50.0% (2.00x slower)", "regression"),        # tok/s down: slower, negative
    (50.0, 100.0, "higher", "+100.0% (2.00x faster)", "improvement"),
    (100.0, 97.0, "higher", "-3.0% (1.03x slower)", "within noise"),
])
def test_changes_read_as_speed_whatever_the_units_direction(old, new, better, text, verdict):
    f = _one(metric(new, "u", better), metric(old, "u", better))
    assert text in f.line() and f.verdict == verdict and (f.change < 0) == (f.speed < 1)


def test_the_line_names_the_metric_both_values_and_both_spreads():
    f = _one(metric(0.0069, "s/step", "lower", spread=0.04), metric(0.0026, "s/step", "lower", spread=0.03))
    assert f.line() == ("regression   train.m: 0.0026 -> 0.0069 s/step, -62.3% (2.65x slower); "
                        "spread 3% -> 4%, floor 10%")
    unstable = _one(metric(0.0069, "s", "lower", spread=0.4, stable=False), metric(0.0026, "s", "lower"))
    assert unstable.line().endswith("; unstable in this run")


def test_a_change_counts_only_beyond_both_spreads():
    slower = metric(70.0, "tok/s", "higher", spread=0.05)
    assert _one(slower, metric(100.0, "tok/s", "higher", spread=0.05)).verdict == "regression"
    # the same 30 % drop inside either run's interval is noise: 70 * (1 + 0.9 / 2) = 101.5 >= 100 ...
    assert _one(metric(70.0, "tok/s", "higher", spread=0.9), metric(100.0, "tok/s", "higher")).verdict == \
        "within noise"
    assert _one(metric(70.0, "tok/s", "higher", spread=0.8), metric(100.0, "tok/s", "higher")).verdict == \
        "regression"                                                            # 70 * 1.4 = 98 < 100
    # ... and 70 * 1.025 = 71.75 >= 100 * (1 - 0.6 / 2) = 70
    assert _one(slower, metric(100.0, "tok/s", "higher", spread=0.6)).verdict == "within noise"
    # the intervals just apart: 70 * 1.025 = 71.75 < 100 * (1 - 0.55 / 2) = 72.5
    assert _one(slower, metric(100.0, "tok/s", "higher", spread=0.55)).verdict == "regression"


def test_the_floor_holds_when_the_spreads_are_narrow():
    old = metric(1.0, "s", "lower", spread=0.0)
    assert _one(metric(1.08, "s", "lower", spread=0.0), old).verdict == "within noise"      # 7.4 % slower
    assert _one(metric(1.2, "s", "lower", spread=0.0), old).verdict == "regression"
    [f] = compare(_doc(m=metric(1.08, "s", "lower")), _doc(m=old), floor=0.05)
    assert f.verdict == "regression" and f.floor == 0.05 and NOISE_FLOOR == 0.10


def test_metrics_on_one_side_only_are_skipped():
    new = _doc(a=metric(1.0, "x", "higher"), torch_only=metric(1.0, "x", "higher"))
    old = _doc(a=metric(1.0, "x", "higher"))
    assert [f.metric for f in compare(new, old)] == ["a"]
    assert compare(new, {"benchmarks": {}}) == []


@pytest.mark.parametrize("field,value,needle", [
    ("stable", "yes", "m.stable must be true or false"),
    ("unit", 3, "m.unit must be a string"),
])
def test_a_bad_new_field_is_an_input_error(field, value, needle):
    with pytest.raises(InputError, match=needle):
        compare(_doc(m=metric(1.0, "x", "higher")), _doc(m=dict(metric(1.0, "x", "higher"), **{field: value})))


def test_not_a_result_is_an_input_error():
    with pytest.raises(InputError, match="not an orion bench result"):
        compare(_doc(), {"hello": 1})


# --- the command, on synthetic results (the run is replaced) --------------------------------------------

def _cli(tmp_path, monkeypatch, new, old):
    monkeypatch.setattr(orion.bench, "run", lambda *a, **k: new)
    base = tmp_path / "base.json"
    base.write_text(json.dumps(old))
    return main(["bench", "--quick", "--compare", str(base)])


def _step(value, spread, stable=True):
    return metric(value, "s/step", "lower", samples=[value] * 8, spread=spread, stable=stable)


def test_compare_exits_3_beyond_both_spreads(tmp_path, monkeypatch, capsys):
    code = _cli(tmp_path, monkeypatch, _doc(orion_step_s=_step(0.2, 0.05)), _doc(orion_step_s=_step(0.1, 0.04)))
    out = capsys.readouterr().out
    assert code == 3
    assert ("regression   train.orion_step_s: 0.1 -> 0.2 s/step, -50.0% (2.00x slower); spread 4% -> 5%, "
            "floor 10%") in out
    assert "1 regression(s)" in out


def test_compare_exits_0_within_the_spreads(tmp_path, monkeypatch, capsys):
    # 30 % slower, but this run's repetitions disagree by 80 %: not a regression anyone can vouch for
    code = _cli(tmp_path, monkeypatch, _doc(orion_step_s=_step(0.13, 0.8, stable=False)),
                _doc(orion_step_s=_step(0.1, 0.04)))
    out = capsys.readouterr().out
    assert code == 0
    assert "within noise train.orion_step_s: 0.1 -> 0.13 s/step, -23.1% (1.30x slower)" in out
    assert "0 regression(s)" in out


def test_an_unstable_figure_is_marked_in_the_table(tmp_path, monkeypatch, capsys):
    new = _doc(orion_step_s=_step(0.1, 0.3, stable=False), orion_optim_s=_step(0.01, 0.02))
    monkeypatch.setattr(orion.bench, "run", lambda *a, **k: new)
    assert main(["bench", "--quick"]) == 0
    out = capsys.readouterr().out
    table = {line.split()[0]: line for line in out.splitlines() if line.startswith("  orion_")}
    assert table["orion_step_s"].endswith("spread  30% (8 reps)  UNSTABLE")
    assert "UNSTABLE" not in table["orion_optim_s"]
    assert "UNSTABLE: 1 figure(s) kept a spread over 10% until the time cap" in out and "train.orion_step_s" in out


def test_a_run_slowed_with_its_comparison_side_is_the_machine_not_a_regression():
    def doc(ours, theirs):
        return _doc(orion_step_s=metric(ours, "s/step", "lower"), torch_step_s=metric(theirs, "s/step", "lower"),
                    speedup_vs_torch=metric(theirs / ours, "x", "higher"))
    found = {f.metric: f.verdict for f in compare(doc(1.4, 1.4), doc(1.0, 1.0))}     # the whole run 40 % slower
    assert found == {"orion_step_s": "machine", "torch_step_s": "machine", "speedup_vs_torch": "within noise"}
    found = {f.metric: f.verdict for f in compare(doc(2.0, 1.0), doc(1.0, 1.0))}     # ours alone: regressions
    assert found == {"orion_step_s": "regression", "torch_step_s": "within noise", "speedup_vs_torch": "regression"}
    # without the comparison side (no torch) an absolute figure gates
    [f] = compare(_doc(orion_step_s=metric(1.4, "s/step", "lower")), _doc(orion_step_s=metric(1.0, "s/step", "lower")))
    assert f.verdict == "regression"
