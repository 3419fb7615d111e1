"""orion.bench.decode: PyTorch's thread setting (1 or its default) is chosen by the median over the same
alternating turns as ours (orion.bench.measure.alternating_blocks), not by a couple of rounds a busy machine
can flip, and the speed-ups are taken per round. Both sides are fakes here whose step times advance a fake
clock; PyTorch's depend on its thread count."""

import functools

from orion.bench import decode
from orion.bench.measure import alternating_blocks

STEP_S = {"orion": [0.8e-3], "torch/1": [1e-3], "torch/2": [0.5e-3] * 12 + [2e-3]}   # 2 threads: fast at first


class Clock:
    t = 0.0

    def __call__(self):
        return self.t


class FakeDecode:
    def __init__(self, name, clock):
        self.name, self.clock, self.rounds = name, clock, 0

    def round(self):
        times = STEP_S[self.name]
        step = times[min(self.rounds, len(times) - 1)]
        self.rounds += 1
        self.clock.t += 13 * step
        return 10 * step, [step] * 3, [1, 2, 3]


def test_the_faster_torch_setting_is_chosen_by_the_median_over_the_same_turns():
    clock = Clock()
    sides = {n: FakeDecode(n, clock) for n in STEP_S}
    torch_names = ["torch/1", "torch/2"]
    rep = alternating_blocks({n: functools.partial(decode._timed_round, s, 8) for n, s in sides.items()},
                             time_cap=10.0, clock=clock, derived=functools.partial(decode._speedups, torch_names))
    assert rep.samples["torch/2 decode_tok_s"][0] == 2000.0            # its first turn looked faster
    assert decode.faster_torch(rep, torch_names) == "torch/1"
    assert set(rep.samples["orion/torch/1 decode"]) == {1.25}           # 0.8 ms vs 1 ms a step, every round
    assert set(rep.samples["orion/torch/1 prefill"]) == {1.25}
