"""Concurrent evals from Python threads (the GIL is released in eval): different programs run in
parallel, calls of one program are serialised, and every result stays exact."""

import threading

import numpy as np

import orion
from runtime_programs import linear_program, rand, weight_blob


def run_threads(n, body):
    """Runs body(i) on n threads and re-raises the first failure."""
    errors = []

    def worker(i):
        try:
            body(i)
        except Exception as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_concurrent_evals_of_different_programs_are_correct():
    progs = [orion.compile_mil(linear_program(), {"@model_path/weights/w.bin": weight_blob(rand((128, 64, 1, 1), 100 + i, 0.1))})
             for i in range(4)]
    x = rand((1, 64, 1, 256), 7)
    expected = [p(x=x)["y"] for p in progs]

    def body(i):
        for _ in range(20):
            np.testing.assert_array_equal(progs[i](x=x)["y"], expected[i])

    run_threads(4, body)


def test_concurrent_calls_of_one_program_are_serialised_correctly():
    prog = orion.compile_mil(linear_program(), {"@model_path/weights/w.bin": weight_blob(rand((128, 64, 1, 1), 5))})
    xs = [rand((1, 64, 1, 256), s) for s in range(4)]
    expected = [prog(x=x)["y"] for x in xs]

    def body(i):
        for _ in range(10):
            np.testing.assert_array_equal(prog(x=xs[i])["y"], expected[i])

    run_threads(4, body)
