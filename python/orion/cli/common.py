"""What every ``orion`` subcommand shares: the parser class (one error style, defaults shown in --help),
flag value types that refuse nonsense up front (defined in :mod:`orion.flags`), and the
--device/--chip/--permissive flags."""

from __future__ import annotations

import argparse
import sys

from ..native import sim as _sim
# the flag value types and UsageError live below the commands (orion.flags): train.run parses the same options
from ..flags import (UsageError, check_writable_target, float_in, int_at_least, int_in, nonneg_float,  # noqa: F401
                     nonneg_int, positive_float, positive_int)
from ..native.runtime import DEVICES    # the --device choices of every command
from ..native.sim import Profile, get_profile

CHIPS = list(_sim.CHIPS)          # defined once, in the native core


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
    base = get_profile()
    return Profile(chip=getattr(args, "chip", None) or base.chip,
                   strictness="permissive" if getattr(args, "permissive", False) else base.strictness)
