"""orion.bench.compare: a metric regressed when it moved against its good direction by more than
max(noise floor, either run's measured spread); missing metrics are skipped; bad documents are typed errors."""

import pytest

from orion.bench import metric
from orion.bench.compare import NOISE_FLOOR, compare
from orion.errors import InputError


def _doc(**metrics):
    return {"schema": "orion-bench/1", "benchmarks": {"decode": {"metrics": metrics, "notes": [], "params": {}}}}


def _verdicts(new, old):
    return {f.metric: f.verdict for f in compare(new, old)}


def test_two_times_slower_is_a_regression_in_both_directions():
    new = _doc(tok_s=metric(50.0, "tok/s", "higher"), step_s=metric(2.0, "s", "lower"))
    old = _doc(tok_s=metric(100.0, "tok/s", "higher"), step_s=metric(1.0, "s", "lower"))
    assert _verdicts(new, old) == {"tok_s": "regression", "step_s": "regression"}
    f = compare(new, old)[0]
    assert f.change == pytest.approx(-0.5) and f.noise == NOISE_FLOOR and "regression" in f.line()


def test_within_the_floor_is_noise_and_faster_is_an_improvement():
    new = _doc(a=metric(95.0, "x", "higher"), b=metric(0.5, "s", "lower"))
    old = _doc(a=metric(100.0, "x", "higher"), b=metric(1.0, "s", "lower"))
    assert _verdicts(new, old) == {"a": "within noise", "b": "improvement"}


def test_a_measured_spread_raises_the_threshold():
    noisy = metric(70.0, "tok/s", "higher", samples=[50.0, 70.0, 90.0])      # spread (90-50)/70 = 57 %
    assert noisy["spread"] == pytest.approx(40 / 70)
    assert _verdicts(_doc(t=noisy), _doc(t=metric(100.0, "tok/s", "higher"))) == {"t": "within noise"}
    # the baseline's spread counts as well
    old = metric(100.0, "tok/s", "higher", spread=0.5)
    assert _verdicts(_doc(t=metric(60.0, "tok/s", "higher")), _doc(t=old)) == {"t": "within noise"}
    assert _verdicts(_doc(t=metric(40.0, "tok/s", "higher")), _doc(t=old)) == {"t": "regression"}


def test_metrics_on_one_side_only_are_skipped():
    new = _doc(a=metric(1.0, "x", "higher"), torch_only=metric(1.0, "x", "higher"))
    old = _doc(a=metric(1.0, "x", "higher"))
    assert [f.metric for f in compare(new, old)] == ["a"]
    assert compare(new, {"benchmarks": {}}) == []


def test_not_a_result_is_an_input_error():
    with pytest.raises(InputError, match="not an orion bench result"):
        compare(_doc(), {"hello": 1})
