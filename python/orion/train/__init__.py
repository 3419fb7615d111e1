"""Training Llama-style models (every family of :class:`orion.models.config.LlamaConfig`: Llama 2/3, SmolLM2,
Qwen 2.5/3, Mistral, Gemma 3, Phi-3, llama2.c Stories) with forward and backward passes as ANE programs
(``orion train``).

Device programs per layer (programs.py), CPU gradients and loss (step.py), AdamW + loss scaling
(optim.py), fp16 safety (stability.py), data (data.py), atomic checkpoints (checkpoint.py), the loop
(trainer.py); weight-update strategies in :mod:`orion.weight_updates`. Built to make the defects of
upstream ANE trainers impossible: outputs read in return order instead of by name (C03), transposed
weight gradients, no RoPE in the training graphs, NaN turned into finite numbers, reloads that leave the
old weights (C07), the user's weight files overwritten in place.
"""

from .errors import (CheckpointError, DataError, ModelTooLarge, ResumeMismatch, StrategyUnavailable,  # noqa: F401
                     TrainError, VocabMismatch)
from .memory import check_memory, estimate as estimate_memory  # noqa: F401
from ..models.config import LlamaConfig  # noqa: F401
from .model import PRESETS, init_params, llama_config  # noqa: F401
from .programs import BudgetExhausted, LayerPrograms  # noqa: F401
from .run_info import Run  # noqa: F401
from .api import RunOutcome, run  # noqa: F401
from .lora_runs import fuse, is_lora_run, run_adapter  # noqa: F401
from .trainer import TrainConfig, Trainer, TrainResult  # noqa: F401

__all__ = ["run", "RunOutcome", "fuse", "is_lora_run", "run_adapter", "Run", "TrainError", "DataError", "VocabMismatch", "CheckpointError", "ResumeMismatch", "StrategyUnavailable",
           "ModelTooLarge", "check_memory", "estimate_memory",
           "LlamaConfig", "llama_config", "PRESETS", "init_params", "BudgetExhausted", "LayerPrograms",
           "TrainConfig", "Trainer", "TrainResult"]
