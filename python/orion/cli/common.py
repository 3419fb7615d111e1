"""What every ``orion`` subcommand shares: the parser class (one error style, defaults shown in --help),
flag value types that refuse nonsense up front, and the --device/--chip/--permissive flags."""

from __future__ import annotations

import argparse
import math
import os
import sys

from .. import sim as _sim
from ..runtime import DEVICES    # the --device choices of every command

CHIPS = list(_sim.CHIPS)          # defined once, in the native core


class UsageError(Exception):
    """A flag value or combination the command refuses before doing any work (exit 2, like argparse)."""


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    # argparse's version also prints "(default: None)" and "(default: False)", which say nothing
    def _get_help_string(self, action):
        h = action.help or ""
        if "default" in h or action.default in (None, False, argparse.SUPPRESS) or action.default == []:
            return h
        if action.option_strings or action.nargs in (argparse.OPTIONAL, argparse.ZERO_OR_MORE):
            return h + " (default: %(default)s)"
        return h


class Parser(argparse.ArgumentParser):
    """``orion: error: <message>`` (exit 2) for every usage error, whichever subcommand's parser found it."""

    def __init__(self, *a, formatter_class=HelpFormatter, **kw):
        super().__init__(*a, formatter_class=formatter_class, **kw)

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(2, f"orion: error: {message}\n")


# ---- flag value types: argparse reports "argument --x: <message>" and exits 2 --------------------------

def _number(kind, text: str):
    try:
        v = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {'an integer' if kind is int else 'a number'}, got {text!r}") \
            from None
    if kind is float and not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def int_at_least(lo: int):
    def parse(text: str) -> int:
        v = _number(int, text)
        if v < lo:
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}")
        return v
    parse.__name__ = f"integer >= {lo}"
    return parse


def int_in(lo: int, hi: int):
    """An integer in [lo, hi]: limits the library defines (one decode eval's columns...), checked at parse time
    so a bad value exits 2 before any model is loaded."""
    def parse(text: str) -> int:
        v = _number(int, text)
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {hi}], got {v}")
        return v
    parse.__name__ = f"integer in [{lo}, {hi}]"
    return parse


positive_int = int_at_least(1)
nonneg_int = int_at_least(0)


def float_in(lo: float, hi: float = math.inf, lo_open: bool = False, hi_open: bool = True):
    def parse(text: str) -> float:
        v = _number(float, text)
        if v < lo or (lo_open and v == lo) or v > hi or (hi_open and v == hi):
            rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
            raise argparse.ArgumentTypeError(f"must be in {rng}, got {text}")
        return v
    parse.__name__ = "number"
    return parse


positive_float = float_in(0.0, lo_open=True)
nonneg_float = float_in(0.0)


def check_writable_target(flag: str, path: str, folder: bool) -> None:
    """``path`` can become a folder (``folder``) or a file: not the other kind already, and its nearest
    existing parent is a writable folder."""
    full = os.path.abspath(path)
    if os.path.exists(full):
        if folder and not os.path.isdir(full):
            raise UsageError(f"{flag} {path}: is a file, not a folder; choose a folder path")
        if not folder and os.path.isdir(full):
            raise UsageError(f"{flag} {path}: is a folder; give a file path")
        if not os.access(full if folder else os.path.dirname(full), os.W_OK):
            raise UsageError(f"{flag} {path}: not writable by this user")
        return
    parent = os.path.dirname(full)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path}: {parent} is a file, so nothing can be created under it")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{flag} {path}: cannot create it, {parent} is not writable by this user")


def add_device_flags(sp) -> None:
    sp.add_argument("--device", default="auto", choices=DEVICES,
                    help="where programs run: the ANE when present (auto), the simulator, or the ANE")
    sp.add_argument("--chip", choices=CHIPS, help="simulator chip profile (default: the current profile's)")
    sp.add_argument("--permissive", action="store_true", help="allow contested ([X]) patterns")


def add_verbose_flag(sp) -> None:
    # SUPPRESS: a subcommand without -v leaves what `orion -v <command>` set
    sp.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                    help="log what orion does; show the traceback of an error")


def profile(args):
    """The simulator profile for --chip / --permissive (the current profile where they are not given)."""
    from ..sim import Profile, get_profile

    base = get_profile()
    return Profile(chip=getattr(args, "chip", None) or base.chip,
                   strictness="permissive" if getattr(args, "permissive", False) else base.strictness)
