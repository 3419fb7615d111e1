"""``orion doctor``: verify the weight-update strategies on this machine (and cache the verdict)."""

from __future__ import annotations

import json

from .. import doctor
from .common import DEVICES


def add_doctor_parser(subparsers) -> None:
    d = subparsers.add_parser("doctor", help="verify the weight-update strategies on this machine")
    d.add_argument("--device", default="auto", choices=DEVICES, help="the device to verify")
    d.add_argument("--cached", action="store_true", help="print the cached verdict instead of probing")
    d.add_argument("--json", action="store_true", help="print the verdict as JSON")
    d.add_argument("--no-cache", action="store_true", help="do not write the verdict cache")
    d.add_argument("--devices", action="store_true", help="list the devices with their capability records")
    d.set_defaults(func=cmd_doctor)


def cmd_doctor(args) -> int:
    if getattr(args, "devices", False):
        print(json.dumps(doctor.device_info(), indent=1))
        return 0
    if args.cached:
        v = doctor.cached_verdict(args.device)
        if v is None:
            print(f"orion doctor: no cached verdict for this machine "
                  f"({doctor.cache_path(doctor.machine(args.device))})")
            return 1
    else:
        v = doctor.run(args.device, out=False, write_cache=not args.no_cache)
    if args.json:
        print(json.dumps(v, indent=1, sort_keys=True))
    else:
        doctor.print_table(v)
    return 0 if v["allowed"] else 1
