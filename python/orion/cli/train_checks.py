"""Checks of ``orion train``'s flags that need more than one value: output paths (a file where a folder
goes, an unwritable parent) and the memory the flags' model would need (orion.train.memory's estimate),
before anything is read, allocated or compiled, so a mistake costs nothing (issue 12 §4, §7)."""

from __future__ import annotations

import os

from .common import UsageError


def check_train_args(args) -> None:
    _check_outputs(args)
    _check_memory(args)


# ---- output paths -------------------------------------------------------------------------------------

def _writable_target(flag: str, path: str, folder: bool) -> None:
    """``path`` can become a folder (``folder``) or a file: not the other kind already, and its nearest
    existing parent is a writable folder."""
    full = os.path.abspath(path)
    if os.path.exists(full):
        if folder and not os.path.isdir(full):
            raise UsageError(f"{flag} {path}: is a file, not a folder; choose a folder path")
        if not folder and os.path.isdir(full):
            raise UsageError(f"{flag} {path}: is a folder; give a file path")
        if not os.access(full if folder else os.path.dirname(full), os.W_OK):
            raise UsageError(f"{flag} {path}: not writable by this user")
        return
    parent = os.path.dirname(full)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {path}: {parent} is a file, so nothing can be created under it")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{flag} {path}: cannot create it, {parent} is not writable by this user")


def _check_outputs(args) -> None:
    if not args.no_ckpt and args.ckpt_dir:
        _writable_target("--ckpt-dir", args.ckpt_dir, folder=True)
    if args.resume:
        if os.path.exists(args.resume) and not os.path.isdir(args.resume):
            raise UsageError(f"--resume {args.resume}: is a file; give the run folder (--ckpt-dir of that run)")
    for flag, attr, folder in (("--export-hf", "export_hf", True), ("--export-adapter", "export_adapter", True),
                               ("--export-bin", "export_bin", False), ("--log-jsonl", "log_jsonl", False)):
        path = getattr(args, attr, None)
        if path:
            _writable_target(flag, path, folder)


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
    from .train import _model_config

    cfg = _model_config(args, PRESETS[args.model or DEFAULTS["preset"]])
    try:
        check_memory(cfg, args.batch or DEFAULTS["batch"], args.seq_len or cfg.n_ctx, lora=bool(args.lora))
    except ModelTooLarge as e:
        given = [f"{flag} {getattr(args, dest)}" for flag, dest in _SIZE_FLAGS if getattr(args, dest, None) is not None]
        raise UsageError(f"{e}" + (f" (sizes set here: {', '.join(given)})" if given else "")) from None


_SIZE_FLAGS = (("--dim", "m_dim"), ("--layers", "m_n_layers"), ("--heads", "m_n_heads"), ("--hidden", "m_hidden_dim"),
               ("--vocab", "m_vocab_size"), ("--seq-len", "seq_len"), ("--batch", "batch"))
