"""``orion train``'s options, one definition for both entry points: the flags (:func:`add_train_options`,
which the command's parser and :func:`orion.train.run`'s keyword check both use), what the model flags mean
(:func:`model_flags`), and the checks of values that need more than one flag - output paths (a file where a
folder goes, an unwritable parent) and the memory the flags' model would need (orion.train.memory's
estimate) - before anything is read, allocated or compiled, so a mistake costs nothing."""

from __future__ import annotations

import argparse
import os
import sys

from ..flags import UsageError, check_writable_target, float_in, nonneg_float, nonneg_int, positive_float, positive_int
from ..models.quantize import MODEL_SCHEMES
from ..native.runtime import DEVICES
from .defaults import DEFAULT_CKPT_DIR, DEFAULTS, INIT_SEQ_LEN, LORA_DEFAULTS, SAMPLE_PROMPT
from .errors import ModelTooLarge
from .memory import check_memory
from .model import PRESETS, resized

EXIT_BUDGET = 75        # exit status: the compile budget ran out under --strategy recompile (a checkpoint was written)


def add_train_options(p: argparse.ArgumentParser) -> None:
    """The flags of ``orion train`` on ``p`` (grouped as its --help shows them)."""
    D, LD = DEFAULTS, LORA_DEFAULTS
    m = p.add_argument_group("model")
    m.add_argument("--model", default=None, metavar="PATH|ORG/NAME",
                   help="start from this model, as orion generate --model finds it: a Hugging Face folder (Llama, "
                        "Qwen, Mistral, Gemma 3, Phi-3; its tokenizer comes along), a Hub id, a llama2.c .bin or an "
                        "orion train run (read only; never overwritten). Default: a fresh --preset model")
    m.add_argument("--preset", default=None, choices=sorted(PRESETS),
                   help=f"a fresh, randomly initialised model of this shape (default: {D['preset']}; the stories* "
                        "presets are those checkpoints' shapes, not their weights)")
    m.add_argument("--init", metavar="PATH", help=argparse.SUPPRESS)      # the old spelling of --model PATH
    for flag, key in (("--dim", "dim"), ("--layers", "n_layers"), ("--heads", "n_heads"),
                      ("--kv-heads", "n_kv_heads"), ("--hidden", "hidden_dim"), ("--vocab", "vocab_size")):
        m.add_argument(flag, dest="m_" + key, type=positive_int, default=None, metavar="N",
                       help=f"override the preset's {key}")
    lo = p.add_argument_group("LoRA fine-tuning")
    lo.add_argument("--lora", metavar="SPEC", default=None,
                    help="train LoRA adapters on a frozen base instead of the model, e.g. r=8,alpha=16,targets=q,v "
                         "(targets: q k v o w1 w2 w3 gate up down, HF names, all-linear; optional layers=0,1)")
    lo.add_argument("--quantize", default=None, choices=MODEL_SCHEMES,
                    help="with --lora: compress the frozen base's linear weights (QLoRA-style; baked as constexpr "
                         "ops, the adapters train on the weights those ops produce)")
    lo.add_argument("--export-adapter", metavar="DIR", default=None,
                    help="write the trained adapter as a PEFT folder (default: <ckpt-dir>/adapter)")
    d = p.add_argument_group("data")
    d.add_argument("--data", metavar="PATH", help="text file/folder, pretokenized uint16 .bin, a .jsonl file or a "
                                                  "folder with train.jsonl / valid.jsonl / test.jsonl (lines "
                                                  "{\"text\"}, {\"prompt\", \"completion\"} or {\"messages\"}; "
                                                  "default: the shipped corpus)")
    d.add_argument("--mask-prompt", action="store_true",
                   help="JSONL data: the loss counts only completions / assistant turns (not the prompts)")
    d.add_argument("--tokenizer", metavar="PATH", help="tokenizer for text data: SentencePiece .model, tokenizer.json, "
                                                       "llama2.c tokenizer.bin; default: the --model checkpoint's own, "
                                                       "else train one on the data (vocab = --vocab)")
    d.add_argument("--seq-len", type=positive_int, default=None,
                   help="tokens per training sequence (default: the preset's context; with --model the model's "
                        f"context up to {INIT_SEQ_LEN}; JSONL data: the longest example)")
    d.add_argument("--val-fraction", type=float_in(0.0, 1.0), default=None,
                   help=f"tail of the data held out for validation, in [0, 1) (default {D['val_fraction']:g})")
    o = p.add_argument_group("optimization")
    o.add_argument("--steps", type=nonneg_int, default=None,
                   help=f"total optimizer steps of the run, also with --resume (default {D['steps']})")
    o.add_argument("--more-steps", type=nonneg_int, default=None, metavar="N",
                   help="with --resume: continue N steps beyond the checkpoint's step")
    o.add_argument("--batch", type=positive_int, default=None, help=f"sequences per microbatch (default {D['batch']})")
    o.add_argument("--accum", type=positive_int, default=None,
                   help=f"microbatches per optimizer step (gradient accumulation; default {D['accum']})")
    o.add_argument("--lr", type=positive_float, default=None,
                   help=f"peak learning rate (warmup + cosine to {D['min_lr_ratio'] * 100:g}%%; default "
                        f"{D['lr']:g}, LoRA {LD['lr']:g})")
    o.add_argument("--warmup", type=nonneg_int, default=None,
                   help=f"warmup steps (default {D['warmup']}, LoRA {LD['warmup']})")
    o.add_argument("--weight-decay", type=nonneg_float, default=None,
                   help=f"AdamW weight decay (default {D['weight_decay']:g}, LoRA {LD['weight_decay']:g})")
    o.add_argument("--clip", type=nonneg_float, default=None,
                   help=f"global gradient-norm clip (0: off; default {D['clip']:g})")
    o.add_argument("--loss-scale", type=positive_float, default=None,
                   help=f"initial dynamic loss scale (default {D['loss_scale']:g})")
    o.add_argument("--residual-scale", type=positive_float, default=None,
                   help="the residual stream's scale inside the fp16 programs, a power of two (default: probed "
                        "at the start on a calibration text and the first training tokens)")
    o.add_argument("--seed", type=int, default=None, help="seed of the initial weights and the data order "
                                                          f"(default {D['seed']})")
    r = p.add_argument_group("device and checkpoints")
    r.add_argument("--strategy", choices=["dynamic", "recompile", "delta"], default=None,
                   help="weight updates: dynamic (weights as program inputs, compile once; default), recompile "
                        "(baked weights, budgeted), delta (only where `orion doctor` verified it)")
    r.add_argument("--device", choices=DEVICES, default=None,
                   help="where programs run (default: auto, the ANE when present, else the simulator)")
    r.add_argument("--ckpt-dir", metavar="DIR", default=None, help=f"checkpoint folder (default: ./{DEFAULT_CKPT_DIR})")
    r.add_argument("--no-ckpt", action="store_true", help="do not write checkpoints")
    r.add_argument("--ckpt-interval", type=nonneg_int, default=None,
                   help=f"steps between checkpoints (0: at the end; default {D['ckpt_interval']})")
    r.add_argument("--keep", type=positive_int, default=None, help=f"checkpoints kept (default {D['keep']})")
    r.add_argument("--resume", nargs="?", const="", metavar="DIR", default=None,
                   help="continue the run in DIR (default: --ckpt-dir)")
    r.add_argument("--restart-on-budget", action="store_true",
                   help="recompile strategy: when the compile budget runs out, checkpoint and re-exec this command "
                        "with --resume (what upstream does with exec())")
    r.add_argument("--dist-timeout", type=positive_float, default=None, metavar="S",
                   help="under mpiexec: seconds a rank waits for the others before aborting the job (default 300)")
    r.add_argument("--eval-interval", type=nonneg_int, default=None,
                   help=f"steps between validation passes (default {D['eval_interval']})")
    r.add_argument("--eval-batches", type=positive_int, default=None,
                   help=f"batches per validation pass (default {D['eval_batches']})")
    s = p.add_argument_group("output")
    s.add_argument("--test", action="store_true",
                   help="after training, report the loss and perplexity on the data's test split (test.jsonl)")
    s.add_argument("--sample-tokens", type=nonneg_int, default=80, help="tokens of the final sample (0: none)")
    s.add_argument("--temperature", "--temp", type=nonneg_float, default=0.8, help="sampling temperature (0: greedy)")
    s.add_argument("--prompt", default=None, help=f"sample prompt (default: {SAMPLE_PROMPT!r})")
    s.add_argument("--export-bin", metavar="PATH", help="also write the trained model as a llama2.c .bin")
    s.add_argument("--export-hf", metavar="DIR", help="also write a Hugging Face folder (the family's config.json, "
                                                      "model.safetensors, the run's tokenizer files)")
    s.add_argument("--log-jsonl", metavar="PATH",
                   help="one JSON record per step and validation pass, flushed per step (default: "
                        "<ckpt-dir>/train_log.jsonl; `orion plot` draws it)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar (one log line per 10 steps)")


# ---- orion.train.run's keywords -----------------------------------------------------------------------

class _RaisingParser(argparse.ArgumentParser):
    """The command's own flag checks, as an exception instead of exit 2."""

    def error(self, message):
        raise UsageError(f"orion.train.run: {message}")


def parse_keywords(options: dict, progress: bool = True) -> argparse.Namespace:
    """:func:`orion.train.run`'s keywords (the flags without the dashes; a flag without a value is a bool) as the
    command's parser reads them, so both entry points refuse the same values with the same messages."""
    parser = _RaisingParser(prog="orion train")
    add_train_options(parser)
    return parser.parse_args(_argv(options, parser) + ([] if progress else ["--no-progress"]))


def _argv(options: dict, parser) -> list[str]:
    flags = {a.dest: a for a in parser._actions if a.option_strings}
    argv = []
    for key, value in options.items():
        action = flags.get(key) or flags.get("m_" + key)
        if action is None or action.help == argparse.SUPPRESS:
            raise UsageError(f"orion.train.run: unknown option {key!r} (the options are orion train's flags, e.g. "
                             f"model, preset, data, steps, lora, mask_prompt)")
        flag = action.option_strings[-1] if action.dest.startswith("m_") else action.option_strings[0]
        if action.nargs == 0:                           # store_true flags
            if not isinstance(value, bool):
                raise UsageError(f"orion.train.run: {key} is on or off (True/False), got {value!r}")
            argv += [flag] if value else []
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def model_flags(args) -> None:
    """One meaning per flag: ``--model`` is a model to start from (as ``orion generate --model``), ``--preset``
    a fresh model's shape. The old spellings still work, each with a one-line note: ``--model <preset>``
    (-> ``--preset``) and ``--init PATH`` (-> ``--model PATH``). Afterwards ``args.preset`` is the preset
    (or None) and ``args.init`` the model to start from (or None)."""
    if args.init is not None:
        if args.model is not None:
            raise UsageError(f"--init {args.init} is the old spelling of --model: give only --model {args.init}")
        print(f"orion train: --init is now --model (--model {args.init})", file=sys.stderr)
        args.model = args.init
    if args.model in PRESETS and not os.path.exists(args.model):
        if args.preset is not None:
            raise UsageError(f"--model {args.model} and --preset {args.preset}: give the preset once, as --preset")
        print(f"orion train: a preset is now --preset (--preset {args.model}); --model names a model to start "
              f"from", file=sys.stderr)
        args.preset, args.model = args.model, None
    if args.model is not None and args.preset is not None:
        raise UsageError(f"--model {args.model} starts from that model's shape and weights; --preset {args.preset} "
                         f"would be a fresh model: give one of them")
    args.init, args.model = args.model, None
    if args.preset is not None and args.preset.startswith("stories"):
        print(f"orion train: --preset {args.preset} is that checkpoint's shape with random weights and a tokenizer "
              f"trained on the data; to fine-tune the checkpoint itself: --model PATH/{args.preset}.bin",
              file=sys.stderr)


def model_config(args, base):
    """``base`` (a preset or a checkpoint's LlamaConfig) with the --dim/--layers/... and --seq-len overrides."""
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
    if args.resume and os.path.exists(args.resume) and not os.path.isdir(args.resume):
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
    cfg = model_config(args, PRESETS[args.preset or DEFAULTS["preset"]])
    try:
        check_memory(cfg, args.batch or DEFAULTS["batch"], args.seq_len or cfg.n_ctx, lora=bool(args.lora))
    except ModelTooLarge as e:
        given = [f"{flag} {getattr(args, dest)}" for flag, dest in _SIZE_FLAGS if getattr(args, dest, None) is not None]
        raise UsageError(f"{e}" + (f" (sizes set here: {', '.join(given)})" if given else "")) from None


_SIZE_FLAGS = (("--dim", "m_dim"), ("--layers", "m_n_layers"), ("--heads", "m_n_heads"), ("--hidden", "m_hidden_dim"),
               ("--vocab", "m_vocab_size"), ("--seq-len", "seq_len"), ("--batch", "batch"))
