"""``orion train``: train a Llama-style model (a fresh ``--preset``, or ``--model`` any family orion loads:
Llama 2/3, SmolLM2, Qwen 2.5/3, Mistral, Gemma 3, Phi-3, llama2.c) with forward and backward passes as
device programs; data as text, pretokenized .bin or JSON Lines (:mod:`orion.train.examples`).

With no arguments it trains the small default model (``tiny``) on the story corpus shipped inside the
package, with a SentencePiece tokenizer trained on the fly, on the default device (the ANE simulator
when there is no ANE), shows a progress bar (loss, tokens/s, the split of each step) and prints a sample.

``--lora r=8,alpha=16,targets=q,v`` fine-tunes LoRA adapters instead of the model: the base (``--model``: a
llama2.c .bin, a Hugging Face folder or Hub id, or an ``orion train`` run; default: a fresh model) is
baked into programs compiled once and frozen, checkpoints hold only the adapters, and the result is a
PEFT adapter folder (``--export-adapter``, default ``<ckpt-dir>/adapter``).

Exit status: 0 done · 1 an orion error (bad file, data or checkpoint) · 2 a bad flag value (refused before any
work) · 75 the compile budget ran out under ``--strategy recompile`` (a checkpoint was written: rerun with
``--resume``) · 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from ..errors import OrionError
from ..train.run_options import EXIT_BUDGET, add_train_options, check_train_args, model_flags  # noqa: F401
from .common import Parser, UsageError, add_verbose_flag
from .entry import run as run_command


def add_train_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "train", help="train a Llama/Stories model on the ANE (or its simulator)",
        description="Train a Llama model with forward/backward passes compiled for the ANE; embedding, loss, "
                    "weight gradients and AdamW on the CPU. No arguments: the default tiny model on the shipped "
                    "story corpus.")
    add_train_options(p)
    p.set_defaults(func=cmd_train)
    return p


def cmd_train(args) -> int:
    # start-up cost: every orion command builds this parser; the launch code (tokenizers, MPI) loads for a run
    from ..train.distributed import from_env  # start-up: orion.train.distributed loads only for `orion train`
    from ..train.launch import run_parsed  # start-up: orion.train.launch loads only for `orion train`
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    model_flags(args)
    check_train_args(args)                 # flag values, output paths and memory, before any work
    dist = from_env(args.dist_timeout)     # None unless launched by mpiexec with several ranks
    if dist is None:
        return run_parsed(args)
    if not dist.is_root:                   # rank 0 reports, logs and exports; the others print only errors
        sys.stdout = open(os.devnull, "w")
        args.no_progress, args.log_jsonl = True, None
        logging.getLogger().setLevel(logging.WARNING)
    try:
        code = run_parsed(args, dist)
    except (OrionError, OSError, UsageError) as e:  # the other ranks may be waiting for this one: end the job
        print(f"orion train: error (MPI rank {dist.rank} of {dist.size}): {e}", file=sys.stderr)
        code = 2 if isinstance(e, UsageError) else 1
    return dist.finish(code)


def main(argv=None) -> int:
    """``orion train`` with ``argv`` after the subcommand (``python -m orion.cli.train``; tests call it in process),
    under the command's one error handler."""
    parser = Parser(prog="orion")
    add_verbose_flag(add_train_parser(parser.add_subparsers(dest="command")))
    return run_command(parser, ["train"] + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
