"""``orion constraints``: the emulated ANE constraints under a chip profile."""

from __future__ import annotations

from ..native.sim import constraints
from .common import CHIPS, profile


def add_constraints_parser(sub) -> None:
    c = sub.add_parser("constraints", help="list the emulated ANE constraints")
    c.add_argument("--chip", choices=CHIPS, help="chip profile (default: the current profile's)")
    c.add_argument("--permissive", action="store_true", help="the permissive profile: contested ([X]) patterns "
                   "allowed")
    c.set_defaults(func=cmd_constraints)


def cmd_constraints(args) -> int:
    for c in constraints(profile(args)):
        print(f"{c['id']}  {c['reaction']:<16} {c['where']:<10} {c['rule']}")
    return 0
