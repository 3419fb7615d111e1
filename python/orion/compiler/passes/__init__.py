"""Compiler passes, one per module; ``pipeline.py`` orders them (see ``default_pipeline()``)."""

from .context import CompileContext, CompileOptions, CompileWarning
from .pipeline import DEFAULT_PIPELINE, PASSES, default_pipeline, run_pipeline

__all__ = ["CompileContext", "CompileOptions", "CompileWarning", "DEFAULT_PIPELINE", "PASSES",
           "default_pipeline", "run_pipeline"]
