"""Flags and helpers shared by several ``orion`` subcommands."""

from __future__ import annotations

CHIPS = ["m1", "m2", "m3", "m4", "m5"]


def add_device_flags(sp) -> None:
    sp.add_argument("--device", default="auto", choices=["auto", "sim", "ane"])
    sp.add_argument("--chip", choices=CHIPS, help="simulator chip profile")
    sp.add_argument("--permissive", action="store_true", help="allow contested ([X]) patterns")


def profile(args):
    """The simulator profile for --chip / --permissive (the current profile where they are not given)."""
    from ..sim import Profile, get_profile

    base = get_profile()
    return Profile(chip=getattr(args, "chip", None) or base.chip,
                   strictness="permissive" if getattr(args, "permissive", False) else base.strictness)
