"""``orion fuse``: a LoRA adapter merged into its base model, written as a Hugging Face folder (the family's
config.json, model.safetensors in fp16, the base's tokenizer files) that transformers and ``orion
generate`` load - mlx-lm's ``fuse`` with the same flag names.

    orion fuse --adapter-path RUN_OR_PEFT_FOLDER [--model BASE] --save-path OUT

``--adapter-path``: an ``orion train --lora`` run (or one of its step folders), which names its base, or a
PEFT adapter folder (then ``--model`` is required)."""

from __future__ import annotations

import os
import sys

from ..lora.files import read_config
from ..train.lora_runs import fuse, is_lora_run
from .common import UsageError


def add_fuse_parser(sub) -> None:
    p = sub.add_parser("fuse", help="merge a LoRA adapter into its base model (a Hugging Face folder)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=None, metavar="PATH",
                   help="the base model (path or ORG/NAME; default: the base an orion train --lora run names)")
    p.add_argument("--adapter-path", "--adapter", dest="adapter", required=True, metavar="PATH",
                   help="an orion train --lora run folder (or step folder) or a PEFT adapter folder")
    p.add_argument("--save-path", required=True, metavar="DIR", help="the fused model's folder (new or empty)")
    p.set_defaults(func=cmd_fuse)


def cmd_fuse(args, out=None) -> int:
    out = out or sys.stdout
    if not os.path.exists(args.adapter):
        raise UsageError(f"--adapter-path {args.adapter}: no such file or folder")
    if not args.model and not is_lora_run(args.adapter):
        read_config(args.adapter)               # a folder that is no adapter: that file error first
        raise UsageError(f"--adapter-path {args.adapter} is a PEFT folder: give its base with --model")
    base, adapter = fuse(args.adapter, args.save_path, args.model)
    print(f"fused {len(adapter.names)} adapted linears of {args.adapter} into {base}: "
          f"{os.path.abspath(args.save_path)}", file=out)
    return 0
