"""How ``orion bench`` turns repetitions into a figure it can vouch for.

A figure is the **median** of its repetitions. Its **spread** is the relative width of the distribution-free
~95 % confidence interval of that median: ``(x_(k) - x_(n+1-k)) / median`` over the sorted samples, with the
rank ``k`` from the binomial distribution (the median lies between the k-th smallest and the k-th largest
sample with probability >= 95 %). Unlike the spread of single repetitions, this one shrinks as repetitions
are added, so a benchmark can repeat until its figure is pinned down: :func:`repeat` runs rounds until every
gated figure's spread is at most ``TARGET_SPREAD``, or its time cap is spent. Below ``MIN_REPS`` repetitions
no such interval exists, so at least that many always run (the cap cannot cut a figure below it). A figure
whose spread stayed above the target is marked ``"stable": false`` - reported, never silently trusted.
"""

from __future__ import annotations

import functools
import statistics
import time
from dataclasses import dataclass, field

TARGET_SPREAD = 0.10
MIN_REPS = 6            # the fewest samples whose full range is a >= 95 % interval of the median (96.9 %)
MAX_REPS = 1000
MIN_BLOCK_S = 0.02      # seconds of back-to-back calls of one side before the other side's turn
MAX_CALLS = 1 << 16
QUICK_TIME_CAP = 3.0    # seconds of repetitions per measurement loop (a benchmark has one per side)
FULL_TIME_CAP = 60.0
_TAIL = 0.025           # each side of the 95 % interval


def time_cap(quick: bool) -> float:
    return QUICK_TIME_CAP if quick else FULL_TIME_CAP


@functools.lru_cache(maxsize=None)
def median_ranks(n: int) -> tuple[int, int]:
    """0-based indices (lo, hi) into ``n`` sorted samples bounding a >= 95 % confidence interval of their
    median (exact binomial ranks); the full range when ``n`` is too small for one."""
    # largest k with P(Binomial(n, 1/2) <= k - 1) <= 2.5 %: then [x_(k), x_(n+1-k)] (1-based) covers >= 95 %
    total, below, c, k = 2 ** n, 0, 1, 0     # c = comb(n, k), updated incrementally
    while k < n and (below + c) <= _TAIL * total:
        below += c
        c = c * (n - k) // (k + 1)
        k += 1
    if k == 0:
        return 0, max(n - 1, 0)
    return k - 1, n - k


def median_interval(samples) -> tuple[float, float]:
    xs = sorted(float(s) for s in samples)
    lo, hi = median_ranks(len(xs))
    return xs[lo], xs[hi]


def rel_spread(samples) -> float:
    """The relative width of the median's confidence interval (module docstring); 0 for fewer than two
    samples (such a figure is never ``stable``: see :func:`metric`)."""
    if len(samples) < 2:
        return 0.0
    med = statistics.median(samples)
    if med <= 0:
        return 0.0
    lo, hi = median_interval(samples)
    return (hi - lo) / med


def metric(value: float, unit: str, better: str, samples=(), spread: float | None = None,
           stable: bool | None = None) -> dict:
    """One number of a result. ``samples``: the repetitions it came from; ``spread`` (relative) defaults to
    theirs; ``stable``: whether the spread was held within ``TARGET_SPREAD`` (default: judged from the
    samples when there are any, else from ``spread``)."""
    samples = [float(s) for s in samples]
    if spread is None:
        spread = rel_spread(samples)
    if stable is None:
        stable = spread <= TARGET_SPREAD and (not samples or len(samples) >= MIN_REPS)
    return {"value": float(value), "unit": unit, "better": better, "spread": float(spread), "stable": bool(stable),
            "samples": samples}


def figure(samples, unit: str, better: str) -> dict:
    """The metric of repeated measurements: their median and its spread."""
    return metric(statistics.median(samples), unit, better, samples)


@dataclass
class Repeated:
    samples: dict = field(default_factory=dict)      # key -> one sample per round
    reps: int = 0
    seconds: float = 0.0
    stopped: str = ""        # "spread within target" | "time cap" | "max repetitions"

    def summary(self) -> dict:
        return {"reps": self.reps, "seconds": round(self.seconds, 3), "stopped": self.stopped}


def repeat(one_round, *, time_cap: float, target: float = TARGET_SPREAD, min_reps: int = MIN_REPS,
           max_reps: int = MAX_REPS, clock=time.perf_counter) -> Repeated:
    """Calls ``one_round()`` (returning ``{key: sample}``) until the spread of every key's samples is at most
    ``target``: at least ``min_reps`` times, at most until ``time_cap`` seconds have passed or ``max_reps``
    rounds ran. ``clock``: seconds, injectable for tests."""
    out = Repeated()
    start = clock()
    while True:
        for key, value in one_round().items():
            out.samples.setdefault(key, []).append(float(value))
        out.reps += 1
        out.seconds = clock() - start
        if out.reps < min_reps:
            continue
        if all(rel_spread(v) <= target for v in out.samples.values()):
            out.stopped = "spread within target"
        elif out.reps >= max_reps:
            out.stopped = "max repetitions"
        elif out.seconds >= time_cap:
            out.stopped = "time cap"
        else:
            continue
        return out


def calls_per_block(fn, clock=time.perf_counter, min_block_s: float = MIN_BLOCK_S) -> int:
    """How many back-to-back calls of ``fn`` last at least ``min_block_s`` (doubling from 1)."""
    calls = 1
    while calls < MAX_CALLS:
        t0 = clock()
        for _ in range(calls):
            fn()
        if clock() - t0 >= min_block_s:
            break
        calls *= 2
    return calls


def alternating_blocks(sides: dict, *, time_cap: float, derived=None, min_block_s: float = MIN_BLOCK_S,
                       clock=time.perf_counter, **repeat_args) -> Repeated:
    """Rounds in which every side (``{name: fn}``, ``fn()`` returning ``{key: sample}``) takes a turn of a
    block of back-to-back calls lasting at least ``min_block_s``, repeated (:func:`repeat`) until every
    figure's spread is within target: samples keyed ``"{name} {key}"``, each the median of one block, and
    those ``derived(round's samples)`` adds (ratios of the sides, held to the target too).
    Why blocks, and why in turns (both seen on a 2-core VM):

    - the machine's speed drifts (1.7x within a minute, a plain numpy loop alike), so a figure measured for
      seconds after the other's differs by the drift; a round's blocks are milliseconds apart, so a ratio of
      two sides taken per round keeps still while the figures move;
    - a call right after the other side's, or after a pause, pays for threads gone to sleep and caches the
      other side filled (a 126 us prefill took 230-680 us so); a block's first call, which pays it, is not
      counted when the block has more, and who goes first alternates from round to round."""
    calls = {name: calls_per_block(fn, clock, min_block_s) for name, fn in sides.items()}
    order = list(sides)

    def one_round():
        out = {}
        for name in order:
            fn, n = sides[name], calls[name]
            if n > 1:
                fn()                                     # the turn's warm-up
            samples = [fn() for _ in range(n)]
            out.update({f"{name} {k}": statistics.median(s[k] for s in samples) for k in samples[0]})
        order.reverse()
        if derived is not None:
            out.update(derived(out))
        return out
    return repeat(one_round, time_cap=time_cap, clock=clock, **repeat_args)


def across_processes(metrics: list[dict]) -> dict:
    """One metric measured in several fresh processes (``orion bench --processes``): the median of their medians,
    and as its spread the larger of the widest in-process spread and the relative spread of the process medians -
    a process can run at another speed as a whole (seen: a tiny training step 1.5x apart from one process to the
    next, each with a 4-7 % spread of its own), which no in-process spread sees. ``processes``: the medians."""
    values = [m["value"] for m in metrics]
    spread = max([rel_spread(values)] + [m["spread"] for m in metrics])
    out = metric(statistics.median(values), metrics[0]["unit"], metrics[0]["better"],
                 samples=[x for m in metrics for x in m["samples"]], spread=spread,
                 stable=all(m["stable"] for m in metrics) and spread <= TARGET_SPREAD)
    out["processes"] = values
    return out

