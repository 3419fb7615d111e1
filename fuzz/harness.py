"""What the fuzz scripts share: their command line (``--seconds --seed --max-cases --hang --memory-gb
--atheris``, an address-space cap so a blow-up is a MemoryError, not the machine's swap), the timed case
loop (each case seeded from the run's seed, so a finding replays; a watchdog dumps a traceback and exits on a
real hang) and the report (findings on stderr, the counts as one JSON line, exit 1 when any finding counts)."""

from __future__ import annotations

import argparse
import faulthandler
import json
import random
import resource
import sys
import time


def parse(description: str, argv=None):
    """(args, the arguments left for atheris), with the address-space cap applied."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-cases", type=int, default=None)
    p.add_argument("--hang", type=float, default=2.0, help="seconds after which a case counts as a hang")
    p.add_argument("--memory-gb", type=float, default=4.0, help="address-space cap (MemoryError past it)")
    p.add_argument("--atheris", action="store_true", help="run under atheris (the other arguments go to it)")
    args, rest = p.parse_known_args(argv)
    resource.setrlimit(resource.RLIMIT_AS, (int(args.memory_gb * (1 << 30)), resource.getrlimit(resource.RLIMIT_AS)[1]))
    return args, rest


def loop(one_case, stats, seconds: float, seed: int, hang: float, max_cases: int | None = None):
    """Calls ``one_case(rng)`` with a fresh seeded generator per case until the time or the case count is
    spent; returns ``stats`` (``stats.counts["cases"]`` is what one_case counts)."""
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    while time.monotonic() < end and (max_cases is None or stats.counts["cases"] < max_cases):
        case_rng = random.Random(rng.getrandbits(64))
        faulthandler.dump_traceback_later(max(30.0, 10 * hang), exit=True)   # a real hang: traceback, exit
        one_case(case_rng)
        faulthandler.cancel_dump_traceback_later()
    return stats


def under_atheris(one_case, stats, rest: list[str]) -> int:
    """Runs ``one_case(random.Random(data))`` for atheris' inputs; the first finding stops it."""
    import atheris

    def test_one_input(data: bytes) -> None:
        one_case(random.Random(data))
        if stats.findings:
            raise AssertionError(stats.findings[0])

    atheris.Setup([sys.argv[0], *rest], test_one_input)
    atheris.Fuzz()
    return 0


def report(stats, bad_kinds) -> int:
    for f in stats.findings:
        print(f, file=sys.stderr)
    print(json.dumps(stats.counts))
    return 1 if sum(stats.counts[k] for k in bad_kinds) else 0
