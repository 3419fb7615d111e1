"""``orion demo``: compile and run the bundled RMSNorm + linear program (orion.demo) and check it."""

from __future__ import annotations

import sys

from .common import add_device_flags, positive_int, profile


def add_demo_parser(sub) -> None:
    d = sub.add_parser("demo", help="compile and run a bundled RMSNorm + linear program and check it")
    add_device_flags(d)
    d.add_argument("--dim", type=positive_int, default=768, help="channels of the input (the linear maps dim -> 4 dim)")
    d.add_argument("--seq", type=positive_int, default=256, help="sequence length (positions)")
    d.set_defaults(func=cmd_demo)


def cmd_demo(args) -> int:
    from ..demo import run_demo  # start-up: orion.demo loads only for `orion demo`

    return run_demo(device=args.device, profile=profile(args), seq=args.seq, dim=args.dim, out=sys.stdout)
