"""MIL text: parse to plain Python data and re-print in canonical form.

Both dialects of MIL text are accepted: ``program(1.3)`` / ``func main<ios18>`` (or
``ios17``) with bare scalar types, and the legacy ``program(1.0)`` / ``func main<ios16>`` with rank-0
``tensor<fp16, []>`` types. Parsing is syntax only (names, shapes and op signatures are checked by the
simulator); literals are checked for element count, value type and range. Malformed text raises
:class:`orion.MILSyntaxError` with 1-based ``line`` and ``column`` (columns count characters).
"""

from __future__ import annotations

from typing import Any, Union

from .. import _native

__all__ = ["parse", "format"]

Text = Union[str, bytes]


def parse(text: Text) -> dict[str, Any]:
    """Parse MIL text (``str`` or UTF-8 ``bytes``) into nested dicts and lists.

    Layout::

        {"version": "1.3", "dialect": "ios18" | "ios16", "buildinfo_type": "dict<string, string>",
         "buildinfo": [[key, value], ...],
         "functions": [{"name", "opset", "line", "column",
                        "params": [{"name", "dtype", "shape", "scalar_form", "line", "column"}],
                        "stmts": [{"out", "op", "type": {"dtype", "shape", "scalar_form"},
                                   "args": [{"name", "kind": "ref" | "literal" | "tuple",
                                             "ref" | "literal" | "tuple": ..., "line", "column"}],
                                   "attrs": {name: literal}, "line", "column"}],
                        "returns": [name, ...]}]}

    A literal is ``{"kind": "scalar" | "tensor" | "blobfile", "dtype", "shape", "scalar_form",
    "line", "column"}`` plus ``"value"`` (a scalar, or a flat row-major list for tensors) or
    ``"path"`` and ``"offset"`` for BLOBFILE weights. Float values are as written (not yet rounded to
    fp16); ``scalar_form`` is true for the bare spelling (``fp16``, ``int32(1)``).

    Raises:
        orion.MILSyntaxError: the text does not parse (``.line``, ``.column`` locate the token).
    """
    return _native.mil_parse(text)


def format(text: Text) -> str:  # noqa: A001 - mirrors the module's vocabulary (parse / format)
    """Parse MIL text and return it in canonical form, in the program's own dialect.

    Canonical form: 4-space indents, ``name = value`` with spaces, ``", "`` separators, arguments and
    attributes in their original order, and float literals printed as the shortest decimal that
    rounds back to the same fp16/fp32 value (``0.125``, ``1e-05``; hex floats become decimals).
    ``format(format(t)) == format(t)`` for every accepted ``t``.

    Raises:
        orion.MILSyntaxError: the text does not parse.
    """
    return _native.mil_format(text)
