"""Checks of ``orion train``'s flags that need more than one value: output paths (a file where a folder
goes, an unwritable parent) and the memory the flags' model would need (orion.train.memory's estimate),
before anything is read, allocated or compiled, so a mistake costs nothing."""

from __future__ import annotations

import os

from .common import UsageError, check_writable_target


def model_config(args, base):
    """``base`` (a preset or a checkpoint's LlamaConfig) with the --dim/--layers/... and --seq-len overrides."""
    from ..train.model import resized
    over = {k[2:]: v for k, v in vars(args).items() if k.startswith("m_") and v is not None}
    if args.seq_len is not None:
        over.setdefault("seq_len", max(args.seq_len, base.n_ctx if args.init else args.seq_len))
    return resized(base, **over)


def check_train_args(args) -> None:
    _check_outputs(args)
    _check_memory(args)


# ---- output paths -------------------------------------------------------------------------------------

def _check_outputs(args) -> None:
    if not args.no_ckpt and args.ckpt_dir:
        check_writable_target("--ckpt-dir", args.ckpt_dir, folder=True)
    if args.resume:
        if os.path.exists(args.resume) and not os.path.isdir(args.resume):
            raise UsageError(f"--resume {args.resume}: is a file; give the run folder (--ckpt-dir of that run)")
    for flag, attr, folder in (("--export-hf", "export_hf", True), ("--export-adapter", "export_adapter", True),
                               ("--export-bin", "export_bin", False), ("--log-jsonl", "log_jsonl", False)):
        path = getattr(args, attr, None)
        if path:
            check_writable_target(flag, path, folder)


# ---- memory -------------------------------------------------------------------------------------------

def _check_memory(args) -> None:
    # only where the flags say what the model is (a preset and its overrides): --init/--resume read it from
    # files, and the trainer checks those before it allocates
    if args.init or args.resume is not None:
        return
    from ..train.defaults import DEFAULTS
    from ..train.errors import ModelTooLarge
    from ..train.memory import check_memory
    from ..train.model import PRESETS

    cfg = model_config(args, PRESETS[args.preset or DEFAULTS["preset"]])
    try:
        check_memory(cfg, args.batch or DEFAULTS["batch"], args.seq_len or cfg.n_ctx, lora=bool(args.lora))
    except ModelTooLarge as e:
        given = [f"{flag} {getattr(args, dest)}" for flag, dest in _SIZE_FLAGS if getattr(args, dest, None) is not None]
        raise UsageError(f"{e}" + (f" (sizes set here: {', '.join(given)})" if given else "")) from None


_SIZE_FLAGS = (("--dim", "m_dim"), ("--layers", "m_n_layers"), ("--heads", "m_n_heads"), ("--hidden", "m_hidden_dim"),
               ("--vocab", "m_vocab_size"), ("--seq-len", "seq_len"), ("--batch", "batch"))
