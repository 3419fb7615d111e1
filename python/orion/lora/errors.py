"""The adapter errors (typed: every one is an :class:`orion.OrionError`)."""

from __future__ import annotations

from ..errors import InputError, ModelFormatError, OrionError

__all__ = ["LoraError", "AdapterConfigError", "AdapterMismatch", "AdapterShapeError", "AdapterFormatError"]


class LoraError(OrionError):
    """Base class of the adapter errors."""


class AdapterConfigError(LoraError, InputError):
    """A bad adapter configuration: unknown target module, rank or alpha out of range, malformed spec."""


class AdapterMismatch(LoraError, ModelFormatError):
    """The adapter belongs to another model (other family, dimensions or base weights)."""


class AdapterShapeError(AdapterMismatch):
    """An adapter tensor has the wrong shape for its linear, or A and B (or the config) disagree on the rank."""


class AdapterFormatError(LoraError, ModelFormatError):
    """An adapter file or folder is missing, corrupt, or uses a PEFT feature orion does not support."""
