"""Where orion train writes: never into the user's inputs (:func:`protect`ed paths: input weights and data),
each file atomically. Below the checkpoint, model export and data modules, which all write through it."""

from __future__ import annotations

import contextlib
import os

from ..fileio import atomic_write as _atomic_write
from .errors import CheckpointError

_protected: set[str] = set()


def protect(path: str | None) -> None:
    """Never write ``path`` (or into it, when a folder) from this module."""
    if path:
        _protected.add(os.path.realpath(path))


def _check_writable(path: str) -> None:
    rp = os.path.realpath(path)
    for p in _protected:
        if rp == p or rp.startswith(p.rstrip(os.sep) + os.sep):
            raise CheckpointError(f"refusing to write {path}: it is (inside) the input {p}, which orion train never "
                                  f"overwrites; choose another output path")


@contextlib.contextmanager
def atomic_write(path: str, mode: str = "wb"):
    """:func:`orion.fileio.atomic_write`, refusing paths inside the user's input weights."""
    _check_writable(os.path.abspath(path))
    with _atomic_write(path, mode) as f:
        yield f


def write_with(path: str, writer) -> None:
    """``writer(f)`` on a new binary file ``path`` (inside an :func:`~orion.fileio.atomic_folder`, which
    fsyncs it)."""
    with open(path, "wb") as f:
        writer(f)
