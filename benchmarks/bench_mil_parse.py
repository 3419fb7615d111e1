"""MIL parser speed: a 10,000-statement program, parse only and parse + print (median of 9 runs).

    PYTHONPATH=python:BUILD python benchmarks/bench_mil_parse.py
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "native"))

from orion import _native  # noqa: E402
from test_mil_parser import big_program  # noqa: E402


def main():
    text = big_program(10000).encode()
    parse, fmt, to_dict = [], [], []
    for _ in range(9):
        t0 = time.perf_counter()
        _native._mil_count_stmts(text)
        t1 = time.perf_counter()
        _native.mil_format(text)
        t2 = time.perf_counter()
        _native.mil_parse(text)
        t3 = time.perf_counter()
        parse.append(t1 - t0), fmt.append(t2 - t1), to_dict.append(t3 - t2)
    print(f"10,000 statements, {len(text) / 1e6:.2f} MB of MIL text (median of 9)")
    print(f"  parse only (C++)            {np.median(parse) * 1e3:7.1f} ms")
    print(f"  parse + print (mil_format)  {np.median(fmt) * 1e3:7.1f} ms")
    print(f"  parse to Python dicts       {np.median(to_dict) * 1e3:7.1f} ms")


if __name__ == "__main__":
    main()
