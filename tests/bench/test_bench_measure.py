"""orion.bench.measure: a figure is the median of its repetitions, its spread the relative width of the
median's exact ~95 % confidence interval (which narrows as repetitions are added); ``repeat`` runs rounds
until every spread is within target, at least MIN_REPS of them, at most until the time cap - timed here by
an injected fake clock, so no test waits. ``alternating_blocks`` gives every side a turn of back-to-back calls
per round, its first call a warm-up, who goes first alternating, and ratios taken per round keep still on a
machine whose speed drifts."""

import math

import numpy as np
import pytest

from orion.bench.measure import (MIN_REPS, TARGET_SPREAD, alternating_blocks, calls_per_block, figure,
                                 median_interval, median_ranks, metric, rel_spread, repeat)


def _coverage(n, k):
    """P(x_(k) <= median <= x_(n+1-k)) (1-based ranks) for a continuous distribution."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


@pytest.mark.parametrize("n", range(MIN_REPS, 80))
def test_the_interval_is_the_tightest_with_95_percent_coverage(n):
    lo, hi = median_ranks(n)
    k = lo + 1
    assert hi == n - k
    assert _coverage(n, k) >= 0.95
    assert _coverage(n, k + 1) < 0.95          # one rank further in would not cover 95 %


def test_below_min_reps_the_interval_is_the_full_range():
    assert MIN_REPS == 6 and _coverage(5, 1) < 0.95 <= _coverage(6, 1)
    for n in range(1, MIN_REPS + 1):
        assert median_ranks(n) == (0, n - 1)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)


def test_the_spread_narrows_with_repetitions_and_ignores_a_stall():
    samples = list(np.random.default_rng(0).normal(1.0, 0.1, 400))
    assert rel_spread(samples[:10]) > TARGET_SPREAD > rel_spread(samples[:100]) > rel_spread(samples)
    steady = [10.0, 10.1, 9.9, 10.0, 10.05, 9.95, 10.0, 10.02, 9.98, 40.0]   # one stalled repetition
    assert rel_spread(steady) < 0.02
    assert rel_spread([]) == rel_spread([3.0]) == 0.0


def test_metric_is_stable_only_with_enough_samples_within_target():
    assert figure([1.0] * MIN_REPS, "s", "lower")["stable"] is True
    assert figure([1.0] * (MIN_REPS - 1), "s", "lower")["stable"] is False      # no 95 % interval yet
    wide = figure([1.0, 2.0] * 10, "s", "lower")
    assert wide["value"] == 1.5 and wide["spread"] == pytest.approx(1 / 1.5) and wide["stable"] is False
    assert metric(2.0, "x", "higher", spread=0.05)["stable"] is True            # a given spread, no samples


class FakeClock:
    def __init__(self, per_call):
        self.t, self.per_call = 0.0, per_call

    def __call__(self):
        self.t += self.per_call
        return self.t


def _script(values):
    it = iter(values)
    return lambda: {"t": next(it)}


def test_steady_samples_stop_at_min_reps():
    rep = repeat(_script([1.0] * 100), time_cap=1e9, clock=FakeClock(0.0))
    assert rep.reps == MIN_REPS and rep.stopped == "spread within target"


def test_noisy_samples_repeat_until_the_spread_is_within_target():
    values = [0.5, 1.5] * 5 + [1.0] * 100          # ten noisy rounds, then steady ones
    rep = repeat(_script(values), time_cap=1e9, clock=FakeClock(0.0))
    s = rep.samples["t"]
    assert rep.stopped == "spread within target" and rep.reps > 10
    assert rel_spread(s) <= TARGET_SPREAD
    assert all(rel_spread(s[:k]) > TARGET_SPREAD for k in range(MIN_REPS, rep.reps))   # not one round later


def test_every_key_is_held():
    it = iter([0.5, 1.5] * 50)
    rep = repeat(lambda: {"steady": 1.0, "noisy": next(it)}, time_cap=20.0, clock=FakeClock(1.0))
    assert rep.stopped == "time cap"
    assert figure(rep.samples["steady"], "s", "lower")["stable"] is True
    assert figure(rep.samples["noisy"], "s", "lower")["stable"] is False


def test_the_time_cap_ends_a_figure_that_never_settles():
    rep = repeat(_script([0.5, 1.5] * 100), time_cap=10.0, clock=FakeClock(1.0))     # 1 s per round
    assert rep.stopped == "time cap" and rep.reps == 10 and rep.seconds == pytest.approx(10.0)
    assert figure(rep.samples["t"], "s", "lower")["stable"] is False


def test_min_reps_run_even_past_the_cap_and_max_reps_bounds_it():
    rep = repeat(_script([0.5, 1.5] * 100), time_cap=1.0, clock=FakeClock(100.0))
    assert rep.reps == MIN_REPS and rep.stopped == "time cap"
    rep = repeat(_script([0.5, 1.5] * 100), time_cap=1e9, max_reps=20, clock=FakeClock(0.0))
    assert rep.reps == 20 and rep.stopped == "max repetitions"


def test_a_figure_from_several_processes_carries_the_spread_between_them():
    from orion.bench.measure import across_processes, metric
    def proc(v):
        return metric(v, "s", "lower", samples=[v * (1 + 0.01 * i) for i in range(-3, 4)])
    apart = across_processes([proc(1.0), proc(1.5), proc(1.1)])
    assert apart["value"] == 1.1 and apart["processes"] == [1.0, 1.5, 1.1]
    assert apart["spread"] >= 0.45 and not apart["stable"]          # each process alone looked settled
    alike = across_processes([proc(1.0), proc(1.0), proc(1.0)])
    assert alike["spread"] == max(proc(1.0)["spread"], 0.0) and alike["stable"]
    assert len(alike["samples"]) == 21



class DriftingMachine:
    """A fake clock on a machine that slows down as it runs: each call of a side costs its base seconds times
    the machine's current slowness, which grows by ``drift`` per call (1.7x over the test, as seen on a VM)."""

    def __init__(self, drift=0.002):
        self.t, self.slowness, self.drift, self.log = 0.0, 1.0, drift, []

    def __call__(self):
        return self.t

    def side(self, name, base_s):
        def call():
            self.log.append(name)
            cost = base_s * self.slowness
            self.t += cost
            self.slowness += self.drift
            return {"s": cost}
        return call


def test_calls_per_block_doubles_until_a_block_lasts_long_enough():
    m = DriftingMachine(drift=0.0)
    assert calls_per_block(m.side("a", 0.003), m, min_block_s=0.02) == 8       # 4 calls last 12 ms, 8 last 24
    assert calls_per_block(m.side("b", 0.5), m, min_block_s=0.02) == 1


def test_sides_take_turns_of_blocks_their_first_call_uncounted_who_goes_first_alternating():
    m = DriftingMachine(drift=0.0)
    rep = alternating_blocks({"a": m.side("a", 0.005), "b": m.side("b", 0.05)}, time_cap=1e9, clock=m,
                             min_block_s=0.02)
    del m.log[:1 + 2 + 4 + 1]                      # calls_per_block: a 1, 2, then 4 calls (20 ms); b 1 (50 ms)
    turns = []
    for name in m.log:
        if turns and turns[-1][0] == name:
            turns[-1][1] += 1
        else:
            turns.append([name, 1])
    assert rep.reps == MIN_REPS
    # a's turn: a warm-up and 4 counted calls; b's: its one call (nothing to warm up in a turn of one).
    # Rounds run a,b | b,a | a,b ...: so a's turns of adjacent rounds meet, then b's
    assert turns == [["a", 5], ["b", 2], ["a", 10], ["b", 2], ["a", 10], ["b", 2], ["a", 5]]
    assert list(rep.samples) == ["a s", "b s"]
    assert rep.samples["a s"] == [0.005] * MIN_REPS and rep.samples["b s"] == [0.05] * MIN_REPS


def test_a_ratio_taken_per_round_keeps_still_while_the_machine_drifts():
    m = DriftingMachine(drift=0.002)
    rep = alternating_blocks({"ours": m.side("ours", 0.004), "theirs": m.side("theirs", 0.008)}, time_cap=1e9,
                             clock=m, max_reps=40,
                             derived=lambda r: {"speedup": r["theirs s"] / r["ours s"]})
    ours, speedup = figure(rep.samples["ours s"], "s", "lower"), figure(rep.samples["speedup"], "x", "higher")
    assert ours["spread"] > TARGET_SPREAD and not ours["stable"]        # the machine slowed 1.7x and more
    assert speedup["value"] == pytest.approx(2.0, rel=0.05) and speedup["stable"]
    assert rep.stopped == "max repetitions"
