"""Typed errors of ``orion train`` (all under :class:`orion.OrionError`)."""

from __future__ import annotations

from ..errors import InputError, ModelFormatError, OrionError


class TrainError(OrionError):
    """Base class of training errors."""


class DataError(TrainError, InputError):
    """Training data is missing, unreadable or too short for one sequence."""


class VocabMismatch(DataError):
    """Token ids or a tokenizer do not fit the model's vocabulary."""


class CheckpointError(TrainError, ModelFormatError):
    """A checkpoint is missing, corrupt, truncated or of an unknown format."""


class ResumeMismatch(CheckpointError):
    """``--resume`` with settings that cannot continue the checkpointed run (model, data, batch...)."""


class ModelTooLarge(TrainError, InputError):
    """The model, batch or sequence length needs more memory than the machine has (estimated up front)."""


class StrategyUnavailable(TrainError):
    """The requested weight-update strategy is not verified on this machine (``orion doctor``)."""


__all__ = ["TrainError", "DataError", "VocabMismatch", "CheckpointError", "ResumeMismatch", "StrategyUnavailable",
           "ModelTooLarge"]
