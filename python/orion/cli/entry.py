"""The ``orion`` command's one error handler (see :mod:`orion.cli`): a parsed command runs here, whichever
parser built it (``orion``'s, or ``python -m orion.cli.train``'s), so every entry point reports errors alike."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import traceback
import warnings

from ..errors import OrionError
from .common import UsageError


def _oneline_warnings(message, category, filename, lineno, line=None):
    # a command prints "AneSimWarning: <what happened>", not the library line that raised it
    return f"{category.__name__}: {message}\n"


@contextlib.contextmanager
def _cli_warnings():
    saved = warnings.formatwarning
    warnings.formatwarning = _oneline_warnings
    try:
        yield
    finally:
        warnings.formatwarning = saved


def _os_message(e: OSError) -> str:
    if e.filename is not None and e.strerror:
        return f"{e.filename}: {e.strerror}"
    return str(e)


def run(parser: argparse.ArgumentParser, argv: list[str] | None = None) -> int:
    """Parses ``argv`` with ``parser`` and runs the command it names under the one error handler: exit 2 for
    a bad flag, 1 for an orion error or an unreadable path, 130 for Ctrl-C; a traceback only with ``-v``."""
    args = parser.parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(message)s")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        with _cli_warnings():
            return int(args.func(args) or 0)
    except UsageError as e:
        err, msg, code = e, str(e), 2
    except OrionError as e:
        err, msg, code = e, str(e), 1
    except OSError as e:         # a path given on the command line that cannot be read or written
        err, msg, code = e, _os_message(e), 1
    except KeyboardInterrupt:
        print("orion: interrupted", file=sys.stderr)
        return 130
    sys.stdout.flush()
    if verbose:
        traceback.print_exception(type(err), err, err.__traceback__)
    print(f"orion: error: {msg}", file=sys.stderr)
    return code
