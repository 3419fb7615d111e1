"""orion.bench.decode: PyTorch's thread setting (1 or its default) is chosen by the medians of repetitions
held to the spread target, not by a couple of rounds a busy machine can flip. PyTorch is a fake here whose
step times depend on its thread count."""

from orion.bench import decode

STEP_S = {1: [1e-3], 2: [0.5e-3] * 3 + [2e-3]}    # 2 threads: fast in the first rounds only


class FakeTorchDecode:
    def __init__(self, cfg, w32, prompt, n_tokens, threads=None):
        self.threads, self.rounds, self.version = threads or 2, 0, "fake"

    def round(self):
        times = STEP_S[self.threads]
        step = times[min(self.rounds, len(times) - 1)]
        self.rounds += 1
        return 10 * step, [step] * 3, [1, 2, 3]


def test_the_faster_torch_setting_is_chosen_by_repeated_medians(monkeypatch):
    monkeypatch.setattr(decode, "TorchDecode", FakeTorchDecode)
    side, rep, by_threads = decode._fastest_torch(None, None, [0] * 8, 4, time_cap=10.0)
    assert side.threads == 1 and by_threads == {1: 1000.0, 2: 500.0}
    assert rep.stopped == "spread within target" and set(rep.samples["decode_tok_s"]) == {1000.0}
