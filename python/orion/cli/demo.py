"""``orion demo``: compile and run the bundled RMSNorm + linear program (orion.demo) and check it."""

from __future__ import annotations

import sys

from .common import add_device_flags, profile


def add_demo_parser(sub) -> None:
    d = sub.add_parser("demo", help="compile and run a bundled RMSNorm + linear program and check it")
    add_device_flags(d)
    d.add_argument("--dim", type=int, default=768)
    d.add_argument("--seq", type=int, default=256)
    d.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    from ..demo import run_demo

    return run_demo(device=args.device, profile=profile(args), seq=args.seq, dim=args.dim, out=sys.stdout)
