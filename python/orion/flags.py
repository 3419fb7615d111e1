"""What a command-line flag (or an option of the Python entry points that take the same options, as
``orion.train.run``) may be: the value types that refuse nonsense up front, the output-path check, and the
error for a refused value. Below every command, so the training layer parses its options without the CLI."""

from __future__ import annotations

import argparse
import math
import os


class UsageError(Exception):
    """A flag value or combination the command refuses before doing any work (exit 2, like argparse)."""


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
