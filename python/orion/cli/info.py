"""``orion info``: build, kernels, threads, simulator profile and compile budget."""

from __future__ import annotations


def add_info_parser(sub) -> None:
    i = sub.add_parser("info", help="build and simulator information")
    i.set_defaults(func=cmd_info)


def cmd_info(args) -> int:
    from .. import __version__, _native
    from ..sim import compile_budget, get_profile

    print(f"orion {__version__}")
    print(f"  native module: {_native.__file__}")
    if hasattr(_native, "kernel_isa"):
        print(f"  simulator kernels: {_native.kernel_isa()}, {_native.num_threads()} threads")
    print(f"  simulator profile: {get_profile()}")
    used, limit = compile_budget()
    print(f"  compile budget: {used} used of {limit}")
    from ..runtime import devices

    for d in devices():
        state = "available" if d["available"] else f"unavailable ({d['reason']})"
        print(f"  backend {d['name']}: {state}")
        for route, status in (d.get("routes") or {}).items():
            print(f"    route {route}: {status}")
        if d["name"] == "ane":  # optional device-info probes that failed: reported, never a refusal
            from ..doctor import ane_control

            for w in (ane_control("info") or {}).get("warnings") or []:
                print(f"    warning: {w}")
    return 0
