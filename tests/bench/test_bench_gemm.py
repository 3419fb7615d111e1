"""orion.bench.gemm: numpy's side runs in this process with its BLAS limited (threadpoolctl) to as many
threads as our pool has; every timed sample is a block of back-to-back calls lasting at least
MIN_BLOCK_S (one small matmul per sample times a thread wake-up, not the GEMM); the ratio is per round.
Both sides and the clock are fakes here: each call advances the fake clock by a fixed time."""

import pytest
from threadpoolctl import ThreadpoolController

from orion.bench import gemm
from orion.bench.measure import MIN_REPS

OURS_S, NUMPY_S = 1e-4, 3e-4          # fake seconds per call
SHAPE = ("tiny", 1, 8, 8, 8)
FLOPS = 2.0 * 8 * 8 * 8


class FakeClock:
    t = 0.0

    def __call__(self):
        return self.t


class FakeNative:
    def __init__(self, clock, threads):
        self.clock, self.threads = clock, threads

    def set_num_threads(self, n):
        pass                                  # the fake pool keeps its size

    def num_threads(self):
        return self.threads

    def kernel_isa(self):
        return "fake"

    def gemm_f16(self, a, b):
        self.clock.t += OURS_S
        return a


class NumpySpy:
    """Stands in for numpy's matmul (the time is the fake clock's), recording the BLAS thread count each call
    ran under."""

    def __init__(self, clock):
        self.clock, self.seen = clock, []
        self.blas = ThreadpoolController().select(user_api="blas").lib_controllers

    def __call__(self, a, b, out):
        self.seen.append({c.num_threads for c in self.blas})
        self.clock.t += NUMPY_S
        return out


@pytest.mark.parametrize("threads", [1, 3])          # at least one differs from any machine's default
def test_numpy_runs_in_process_with_our_thread_count(threads):
    clock = FakeClock()
    spy = NumpySpy(clock)
    before = {c.num_threads for c in spy.blas}
    section = gemm.run(quick=True, native=FakeNative(clock, threads), clock=clock, numpy_gemm=spy, pause=0.0)
    assert spy.seen and all(s == {threads} for s in spy.seen)
    assert {c.num_threads for c in spy.blas} == before                 # the limit is lifted afterwards
    assert section["params"]["numpy_blas"]["num_threads"] == threads


def test_each_sample_is_a_block_of_calls_and_the_figures_are_medians():
    clock = FakeClock()
    with gemm.numpy_threads(1):
        pairs = gemm.GemmPairs(FakeNative(clock, 1), [SHAPE], clock, NumpySpy(clock), min_block_s=0.01, pause=0.0)
    ours_calls, numpy_calls = pairs.calls[0]
    assert (ours_calls, numpy_calls) == (128, 64)      # the fewest doublings reaching 10 ms: not one call
    assert pairs.ours_block(0) == pytest.approx(OURS_S) and pairs.numpy_block(0) == pytest.approx(NUMPY_S)

    clock = FakeClock()
    section = gemm.run(quick=True, native=FakeNative(clock, 1), clock=clock, numpy_gemm=NumpySpy(clock),
                       pause=0.0, min_block_s=0.01)
    _name, batch, m, k, n = gemm.QUICK_SHAPES[0]
    key = gemm.shape_key(batch, m, k, n)
    flops = 2.0 * batch * m * k * n
    metrics = section["metrics"]
    assert metrics[f"orion_gflops_{key}"]["value"] == pytest.approx(flops / OURS_S / 1e9)
    assert metrics[f"numpy_gflops_{key}"]["value"] == pytest.approx(flops / NUMPY_S / 1e9)
    ratio = metrics[f"ratio_vs_numpy_{key}"]
    assert ratio["value"] == pytest.approx(NUMPY_S / OURS_S) and len(ratio["samples"]) == MIN_REPS
    assert all(m["stable"] and m["spread"] == pytest.approx(0) for m in metrics.values())
    assert section["params"]["repeat"]["stopped"] == "spread within target"
