"""The W8A8 flags shared by ``orion generate`` and ``orion quality``: ``--activations int8`` (int8 inputs of
the int8 linears, experimental) and ``--calibration FILE`` (the text its static scales come from)."""

from __future__ import annotations

import sys
import warnings

from ..errors import InputError
from ..models.quantize import ACTIVATION_SCHEMES, W8A8_WARNING, ExperimentalWarning
from .common import UsageError


def add_activation_flags(p, calibration_help: str) -> None:
    p.add_argument("--activations", default=None, choices=ACTIVATION_SCHEMES,
                   help="experimental W8A8: quantize the inputs of the int8 linears too (needs --quantize int8; "
                   "static per-tensor scales)")
    p.add_argument("--calibration", default=None, metavar="FILE", help=calibration_help)


def check_activation_flags(args) -> None:
    """Usage errors before any work: the flags that need --activations int8 / --quantize int8."""
    acts = getattr(args, "activations", None)
    if acts is not None and getattr(args, "quantize", None) != "int8":
        raise UsageError(f"--activations {acts} quantizes the inputs of int8 linears (W8A8): it needs --quantize "
                         f"int8, got --quantize {getattr(args, 'quantize', None)}")
    if acts is None and getattr(args, "calibration", None) is not None:
        raise UsageError("--calibration is only used with --activations int8")


def read_text(flag: str, path) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{flag} {path}: cannot read it as UTF-8 text ({e})") from None


def load_w8a8(load, model, err=None, **kw):
    """``load(model, activations=..., calibration=...)`` printing the experimental warning as one line
    (``orion: warning: ...``) instead of Python's two-line warning display."""
    if kw.get("activations") is None:
        return load(model, **kw)
    print(f"orion: warning: {W8A8_WARNING}", file=err or sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return load(model, **kw)
