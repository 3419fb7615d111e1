"""Two builds of one kernel file compared by their machine code (objdump -d): for each function, the histogram of
opcodes by operand kind (register / memory) - identical histograms mean the same instructions up to register
choice and order -, and for the functions named by --loops, each backward-jump loop's instruction count and
histogram. What a refactor of a hot kernel is checked with when timing on a shared machine cannot see 1 %.

    python scripts/compare_objects.py OLD.o NEW.o [--loops gemm_panel panels_of panels_q8 ...] [--prefetches 2 --max-size 60]
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess


def functions(path: str) -> dict[str, list[tuple[int, str]]]:
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", path], check=True, capture_output=True,
                         text=True).stdout
    fs: dict[str, list] = {}
    cur = None
    for line in out.splitlines():
        m = re.match(r"^[0-9a-f]+ <(.*)>:$", line)
        if m:
            cur = m.group(1)
            fs[cur] = []
            continue
        m = re.match(r"^\s+([0-9a-f]+):\t(.*)$", line)
        if cur and m:
            fs[cur].append((int(m.group(1), 16), m.group(2).strip()))
    return fs


def histogram(instructions) -> collections.Counter:
    return collections.Counter(("mem " if "(" in i else "reg ") + i.split()[0] for i in instructions if i)


def loops(body) -> list[collections.Counter]:
    out = []
    for addr, ins in body:
        m = re.match(r"^j\w+\s+([0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < addr:
            out.append(histogram(i for a, i in body if int(m.group(1), 16) <= a <= addr))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--loops", nargs="*", default=[], help="substrings of function names whose loops to list")
    ap.add_argument("--prefetches", type=int, default=0,
                    help="list only loops with at least this many prefetches (a GEMV's k loop), with their histograms")
    ap.add_argument("--max-size", type=int, default=0, help="list only loops of at most this many instructions "
                    "(inner loops: an outer one contains them)")
    a = ap.parse_args()
    old, new = functions(a.old), functions(a.new)
    ho = collections.Counter(tuple(sorted(histogram(i for _, i in b).items())) for b in old.values())
    hn = collections.Counter(tuple(sorted(histogram(i for _, i in b).items())) for b in new.values())
    print(f"functions {len(old)} -> {len(new)}, instructions {sum(map(len, old.values()))} -> "
          f"{sum(map(len, new.values()))}; functions whose histogram has no twin: old {sum((ho - hn).values())}, "
          f"new {sum((hn - ho).values())}")
    for side, fs, other in (("old", old, hn), ("new", new, ho)):
        for name, body in fs.items():
            if tuple(sorted(histogram(i for _, i in body).items())) not in other:
                print(f"  {side} only: {name[:110]} ({len(body)} instructions)")
    for want in a.loops:
        for side, fs in (("old", old), ("new", new)):
            for name, body in fs.items():
                if want in name:
                    ls = [h for h in loops(body) if h["mem prefetcht0"] >= a.prefetches and
                          (not a.max_size or sum(h.values()) <= a.max_size)]
                    print(f"  {side} {name[:90]}: loops of {[sum(h.values()) for h in ls]} instructions")
                    if a.prefetches:
                        for h in ls:
                            print("     ", dict(sorted(h.items())))


if __name__ == "__main__":
    main()
