"""MIL text emission (``mil.py``) and weight files (``weights.py``)."""

from .mil import emit, format_float
from .weights import WeightFiles, build as build_weights

__all__ = ["emit", "format_float", "WeightFiles", "build_weights"]
