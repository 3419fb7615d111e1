"""The orion exception hierarchy. Native code raises these same classes (bindings/errors.cpp)."""

from __future__ import annotations


class OrionError(Exception):
    """Base class of every error orion raises."""

    constraint: str | None = None  # "C18" when a documented ANE constraint is the cause
    statement: str | None = None  # offending MIL statement / graph node, when known


class MILSyntaxError(OrionError, ValueError):
    """MIL text that does not parse; ``line`` and ``column`` are 1-based."""

    line: int = 0
    column: int = 0


class CompileError(OrionError):
    """The ANE compiler (or the simulator reproducing it) rejects the program."""


class EvalError(OrionError):
    """Evaluation failed as on the hardware (``status`` e.g. 0x1d)."""

    status: int = 0


class BudgetExceeded(CompileError):
    """The per-process compile budget (C05) is exhausted."""


class WeightUpdateError(OrionError):
    """A weight-update primitive could not be applied."""


class BlobFormatError(OrionError, ValueError):
    """A MILBlob weight file is malformed."""


class ProgramStateError(OrionError):
    """A program was used in the wrong lifecycle state (released, not loaded, ...)."""


class InputError(OrionError, ValueError):
    """Caller data does not match the program: names, shapes, dtypes, memory layout."""


class ModelFormatError(OrionError, ValueError):
    """A model, checkpoint or tokenizer file is missing, corrupt or of the wrong kind."""


class QuantizationError(OrionError, ValueError):
    """Weights, parameters or logits given to ``orion.quant`` that cannot be quantized or compared as asked."""


class AneSimWarning(UserWarning):
    """The simulator reproduced a silent hardware behaviour (wrong data included)."""

    # The native messages start with "AneSimWarning: " (for C++-side logs); Python's warning display puts the
    # category name in front itself, so the text drops it once.
    def __str__(self) -> str:
        return super().__str__().removeprefix("AneSimWarning: ")


__all__ = [
    "OrionError", "MILSyntaxError", "CompileError", "EvalError", "BudgetExceeded", "WeightUpdateError",
    "BlobFormatError", "ProgramStateError", "InputError", "ModelFormatError", "QuantizationError",
    "AneSimWarning",
]
