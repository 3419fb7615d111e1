"""``orion generate``: text generation with a GPT-2 / Llama checkpoint on ANE programs.

    orion generate --model PATH|ORG/NAME --prompt "Once upon a time" [--max-tokens 64] [--temp 0.8]
                   [--top-k 40] [--top-p 0.95] [--repetition-penalty 1.1] [--seed 0] [--device sim]
                   [--adapter-path PEFT_FOLDER] [--chat]
    orion generate --model PATH --prompts-file prompts.txt [--batch 16] [...]
    orion generate --model PATH --prompt "..." --speculative prompt-lookup | --draft SMALL_MODEL [--draft-k 4]

The flags mlx-lm users know work as there (``--temp``, ``--adapter-path``, ``--max-tokens``); orion's
longer names (``--temperature``, ``--adapter``) are the same flags.

``--prompts-file`` generates one prompt per line as a batch: up to ``--batch`` (<= 16) sequences share
each decode eval, a finished one's column taking the next prompt; per-stream and aggregate tok/s go to
stderr.

``--speculative prompt-lookup`` and ``--draft`` verify several drafted tokens per decode eval of the
model (greedy: the same tokens as without; sampling: the same distribution); stderr shows the target
evals, tokens per eval and the draft acceptance.

``--chat`` sends the prompt as a user message through the tokenizer's chat template; the answer stops
at the template's end-of-turn token (the model's eos ids).

Text is printed as it is generated; prefill and decode speeds (and compile time) go to stderr at the
end.
"""

from __future__ import annotations

import os
import sys

from .. import models
from ..errors import InputError
from ..lora.files import read_config
from ..models.batch import MAX_BATCH, BatchStats
from ..models.classifier import WEIGHTS
from ..models.quantize import MODEL_SCHEMES
from ..models.speculative import MAX_DRAFT
from ..native.runtime import resolve_device
from ..native.sim import Profile, get_profile
from ..train.lora_runs import is_lora_run
from ..train.lora_runs import run_adapter as read_run
from .common import CHIPS, DEVICES, UsageError, check_writable_target, float_in, int_in, nonneg_float, nonneg_int
from .w8a8 import add_activation_flags, check_activation_flags, load_w8a8, read_text

__all__ = ["add_generate_parser", "cmd_generate"]


def _classifier_weights(args) -> dict:
    """``classifier_weights`` for load() when --classifier-weights was given (else the model's default)."""
    kind = getattr(args, "classifier_weights", None)
    return {} if kind is None else {"classifier_weights": kind}


def add_generate_parser(subparsers):
    g = subparsers.add_parser("generate", help="generate text with a GPT-2 or Llama checkpoint",
                              description="Generate text with a Hugging Face GPT-2/Llama folder (config.json + "
                              "model.safetensors) or a llama2.c .bin, on the ANE or its simulator.")
    g.add_argument("--model", required=True, help="checkpoint folder or file, a model name found in "
                   "$ORION_MODEL_PATH / ~/.cache/orion/models, or a Hugging Face Hub id such as Qwen/Qwen3-0.6B "
                   "(its cache first; downloaded unless HF_HUB_OFFLINE=1)")
    g.add_argument("--prompt", default="", help="prompt text (default: start from BOS / <|endoftext|>)")
    g.add_argument("--prompt-ids", default=None, help="prompt as token ids, e.g. '1 403 407' (models without a "
                   "tokenizer)")
    g.add_argument("--tokenizer", default=None, help="tokenizer file (tokenizer.json, tokenizer.model, tokenizer.bin, "
                   "vocab.json)")
    g.add_argument("--chat", action="store_true", help="send the prompt as a user message through the chat template "
                   "of tokenizer_config.json (instruct models); stops at the end of the answer's turn")
    g.add_argument("--prompts-file", default=None, metavar="FILE", help="one prompt per line (blank lines "
                   "skipped; token ids separated by spaces for models without a tokenizer), generated as a batch")
    g.add_argument("--batch", type=int_in(1, MAX_BATCH), default=None,
                   help=f"with --prompts-file: sequences per decode eval (1..{MAX_BATCH}, one per decode column; "
                   f"default {MAX_BATCH})")
    g.add_argument("--speculative", default=None, choices=["prompt-lookup"], help="speculative decoding with "
                   f"n-gram drafts from the prompt and the text, up to {MAX_DRAFT} verified per eval (greedy: the "
                   "same tokens; sampling: the same distribution)")
    g.add_argument("--draft", default=None, metavar="PATH_OR_NAME", help="speculative decoding with this smaller "
                   "model of the same tokenizer proposing --draft-k tokens per target eval (as --model: path, "
                   "name or Hub id; --tokenizer applies to it too; greedy: the same tokens, sampling: the same "
                   "distribution)")
    g.add_argument("--draft-k", type=int_in(1, MAX_DRAFT), default=None, metavar="K",
                   help=f"with --draft: tokens the draft proposes per round (1..{MAX_DRAFT}; default 4)")
    g.add_argument("--max-tokens", "-m", type=nonneg_int, default=64,
                   help="tokens to generate at most (fewer when the model's context ends first)")
    g.add_argument("--temp", "--temperature", dest="temperature", type=nonneg_float, default=0.0,
                   help="sampling temperature; 0 = greedy")
    g.add_argument("--top-k", type=nonneg_int, default=0, help="sample among the k most likely tokens (0: all)")
    g.add_argument("--top-p", type=float_in(0.0, 1.0, lo_open=True, hi_open=False), default=1.0,
                   help="nucleus sampling: the smallest set of tokens with this much probability (1: all)")
    g.add_argument("--repetition-penalty", type=float_in(0.0, lo_open=True), default=1.0,
                   help="divide the logits of tokens already seen by this (1: off)")
    g.add_argument("--seed", type=nonneg_int, default=None, help="sampling seed (default: a fresh one each run)")
    g.add_argument("--stop-token", type=int, action="append", default=None, help="stop at this token id "
                   "(repeatable; default: the model's end-of-text)")
    g.add_argument("--device", default="auto", choices=DEVICES,
                   help="where programs run: the ANE when present (auto), the simulator, or the ANE")
    g.add_argument("--chip", choices=CHIPS, help="simulator chip profile")
    g.add_argument("--classifier", default="cpu", choices=["cpu", "device"], help="run the vocabulary projection "
                   "on the CPU (default) or as chunked programs")
    g.add_argument("--classifier-weights", default=None, choices=WEIGHTS, help="the CPU classifier's weights "
                   "(default: int8 with --quantize, else fp16)")
    g.add_argument("--adapter-path", "--adapter", dest="adapter", default=None, metavar="DIR", help="LoRA adapter (PEFT folder: adapter_config.json + "
                   "adapter_model.safetensors, e.g. from orion train --lora); A/B become program inputs")
    g.add_argument("--quantize", default=None, choices=MODEL_SCHEMES,
                   help="compress the layers' linear weights at load (constexpr ops in the programs; "
                   "orion quality measures what it costs)")
    add_activation_flags(g, "W8A8 calibration text file (default: the activation_scales.json saved with the model)")
    g.add_argument("--cache-dir", default=None, help="weight cache folder (default $ORION_CACHE_DIR or "
                   "~/.cache/orion; kept under $ORION_CACHE_MAX_GB, default 32)")
    g.add_argument("--no-cache", action="store_true", help="convert the weights in memory only: neither read nor "
                   "write the weight cache")
    g.set_defaults(func=cmd_generate)
    return g


def check_generate_flags(args):
    """Every flag of ``orion generate`` checked before any model is loaded: combinations (exit 2), then the
    files the flags name (exit 1). Returns (prompt ids of --prompt-ids or None, lines of --prompts-file or
    None)."""
    chat, batch_file = getattr(args, "chat", False), getattr(args, "prompts_file", None)
    draft_path, lookup = getattr(args, "draft", None), getattr(args, "speculative", None)
    if chat and args.prompt_ids is not None:
        raise InputError("--chat takes the message as --prompt text, not --prompt-ids")
    if args.prompt and args.prompt_ids is not None:
        raise UsageError("give the prompt as --prompt text or as --prompt-ids, not both")
    if draft_path and lookup:
        raise UsageError("--draft and --speculative prompt-lookup are two kinds of drafts: give either")
    if chat and (draft_path or lookup):
        raise UsageError("--chat is not supported with --speculative / --draft")
    if getattr(args, "draft_k", None) is not None and not draft_path:
        raise UsageError("--draft-k is only used with --draft (the tokens a draft model proposes per round)")
    if batch_file:
        if draft_path or lookup:
            raise UsageError("--prompts-file generates a batch, without speculative decoding: drop --speculative / "
                             "--draft")
        if chat:
            raise UsageError("--chat is not supported with --prompts-file")
        if args.prompt or args.prompt_ids is not None:
            raise UsageError("--prompts-file holds the prompts: drop --prompt / --prompt-ids")
    elif getattr(args, "batch", None) is not None:
        raise UsageError("--batch is only used with --prompts-file (the sequences of one decode eval)")
    if getattr(args, "cache_dir", None) is not None:
        if getattr(args, "no_cache", False):
            raise UsageError("--cache-dir is not used with --no-cache (which neither reads nor writes the cache)")
        check_writable_target("--cache-dir", args.cache_dir, folder=True)
    check_activation_flags(args)
    ids = None
    if args.prompt_ids is not None:
        try:
            ids = [int(t) for t in args.prompt_ids.replace(",", " ").split()]
        except ValueError:
            raise InputError(f"--prompt-ids must be integers separated by spaces, got {args.prompt_ids!r}") from None
        if any(t < 0 for t in ids):
            raise InputError(f"--prompt-ids must be token ids (integers >= 0), got {args.prompt_ids!r}")
    if args.tokenizer and not os.path.exists(args.tokenizer):
        raise InputError(f"--tokenizer {args.tokenizer}: no such file or folder")
    if getattr(args, "adapter", None):
        read_config(args.adapter)
    return ids, (_read_prompt_lines(batch_file) if batch_file else None)


def cmd_generate(args, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    prompt_ids, prompt_lines = check_generate_flags(args)
    chat = getattr(args, "chat", False)
    draft_path, lookup = getattr(args, "draft", None), getattr(args, "speculative", None)
    profile = None
    if getattr(args, "chip", None):
        base = get_profile()
        profile = Profile(chip=args.chip, strictness=base.strictness)
    calib = read_text("--calibration", args.calibration) if getattr(args, "calibration", None) else None
    run_adapter = None
    if not getattr(args, "adapter", None):
        if is_lora_run(args.model):         # an orion train --lora run: its base model + its adapters
            base, run_adapter = read_run(args.model)
            print(f"orion generate: {args.model} is a LoRA run: its base {base} with the adapter of "
                  f"{run_adapter.name}", file=err)
            args.model = base
    model = load_w8a8(models.load, args.model, err, tokenizer=args.tokenizer, device=args.device, profile=profile,
                      cache=args.cache_dir, use_cache=not getattr(args, "no_cache", False), classifier=args.classifier,
                      quantize=getattr(args, "quantize", None), activations=getattr(args, "activations", None),
                      calibration=calib, **_classifier_weights(args))
    if getattr(args, "adapter", None) or run_adapter is not None:
        model.set_adapter(run_adapter or args.adapter)
    kw = dict(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
              repetition_penalty=args.repetition_penalty, seed=args.seed, stop_tokens=args.stop_token)
    if prompt_lines is not None:
        return _generate_file(model, args, _prompts(prompt_lines, args.prompts_file, model), kw, out, err)
    if prompt_ids is not None:
        prompt = prompt_ids
    elif model.tokenizer is None:
        if args.prompt:
            raise InputError(f"{args.model}: no tokenizer found next to the checkpoint; pass --tokenizer FILE or "
                             f"--prompt-ids")
        bos = model.config.bos_id
        prompt = [bos if bos is not None else 0]
    else:
        prompt = args.prompt
    if draft_path or lookup:
        spec = lookup
        if draft_path:
            spec = models.load(draft_path, tokenizer=args.tokenizer, device=args.device, profile=profile,
                        cache=args.cache_dir, use_cache=not getattr(args, "no_cache", False),
                        classifier=args.classifier, **_classifier_weights(args))
        r = model.generate(prompt, speculative=spec, draft_k=args.draft_k if draft_path else None, **kw)
        text = r.text if model.tokenizer is not None else " ".join(str(t) for t in r.tokens)
        out.write((prompt if isinstance(prompt, str) else "") + text + "\n")
        out.flush()
        print(f"[{model.name}] {len(r.tokens)} generated, decode {_rate(len(r.tokens) - 1, r.decode_seconds)}, "
              f"{_spec_stats(r)}; stop: {r.stop_reason}", file=err)
        return 0
    if chat:
        stream = model.chat([{"role": "user", "content": args.prompt}], stream=True, **kw)
    else:
        stream = model.stream(prompt, **kw)
    echo = prompt if isinstance(prompt, str) and not chat else ""
    started = False
    try:
        for tok in stream:
            if not started:             # the prompt is echoed once generation runs (an error stays on its line)
                out.write(echo)
                started = True
            out.write(tok.text if model.tokenizer is not None else f"{tok.id} ")
            out.flush()
    finally:
        if started:
            out.write("\n")
            out.flush()
    if not started and echo:
        out.write(echo + "\n")
        out.flush()
    r = stream.result
    print(f"[{model.name} on {resolve_device(model.device)}] {_stats(r)}", file=err)
    if r.stop_reason == "context":
        n_ctx = model.config.n_ctx
        print(f"orion: note: stopped after {len(r.tokens)} of --max-tokens {args.max_tokens} tokens: the prompt "
              f"({len(r.prompt_tokens)} tokens) and the answer filled the model's context of {n_ctx}", file=err)
    return 0


def _rate(n: int, seconds: float) -> str:
    return f"{n / seconds:.1f} tok/s" if seconds > 0 and n > 0 else "- tok/s"


def _spec_stats(r) -> str:
    """The speculation figures of a SpeculativeGeneration."""
    if not r.drafted:
        return f"{r.decode_steps} target evals, no drafts"
    draft = f", {r.draft_evals} draft evals" if r.draft_evals else ""
    return (f"{r.decode_steps} target evals ({r.tokens_per_eval:.2f} tokens per eval){draft}, draft acceptance "
            f"{r.acceptance_rate:.2f} ({r.accepted} of {r.drafted})")


def _stats(r) -> str:
    """One line of timings; a phase that did not run says so instead of "nan tok/s"."""
    prefill = f"prefill {r.prefill_seconds * 1e3:.1f} ms ({_rate(len(r.prompt_tokens), r.prefill_seconds)})"
    decode = (f"decode {_rate(r.decode_steps, r.decode_seconds)} over {r.decode_steps} steps" if r.decode_steps
              else "no decode steps")
    return (f"prompt {len(r.prompt_tokens)} tokens, {prefill}; {len(r.tokens)} generated, {decode}; compile "
            f"{r.compile_seconds:.2f} s; stop: {r.stop_reason}")


def _read_prompt_lines(path: str) -> list[tuple[int, str]]:
    """(line number, text) of the non-blank lines of --prompts-file, read before the model loads."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"--prompts-file {path}: cannot read it ({e.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"--prompts-file {path}: not UTF-8 text (byte 0x{data[e.start]:02x} at byte offset "
                         f"{e.start}); give one prompt per line as text") from None
    lines = [(no, ln.rstrip("\r")) for no, ln in enumerate(text.split("\n"), 1) if ln.strip()]
    if not lines:
        raise InputError(f"--prompts-file {path} holds no prompt (one per line; blank lines are skipped)")
    return lines


def _prompts(lines: list[tuple[int, str]], path: str, model) -> list:
    """The prompts of --prompts-file for ``model``: texts, or token ids when it has no tokenizer."""
    if model.tokenizer is not None:
        return [ln for _, ln in lines]
    prompts = []
    for no, ln in lines:
        try:
            prompts.append([int(t) for t in ln.replace(",", " ").split()])
        except ValueError:
            raise InputError(f"--prompts-file {path}, line {no}: the model has no tokenizer, so each line must be "
                             f"token ids separated by spaces; got {ln[:40]!r}") from None
    return prompts


def _generate_file(model, args, prompts, kw, out, err) -> int:
    batch = args.batch or MAX_BATCH
    st = BatchStats()
    gens = model.generate_batch(prompts, max_batch=batch, stats=st, **kw)
    for i, (p, g) in enumerate(zip(prompts, gens)):
        body = g.text if model.tokenizer is not None else " ".join(str(t) for t in g.tokens)
        out.write(f"--- [{i}] ---\n{p if isinstance(p, str) else ''}{body}\n")
    out.flush()
    for i, g in enumerate(gens):
        print(f"[{i}] {_stats(g)} (decode per stream)", file=err)
    cols = sum(st.columns_used) / len(st.columns_used) if st.columns_used else 0.0
    print(f"[{model.name} on {resolve_device(model.device)}] {st.sequences} sequences, batch {batch}: "
          f"{st.generated} tokens in {st.seconds:.2f} s = {_rate(st.generated, st.seconds)} aggregate over "
          f"{st.decode_evals} decode evals ({cols:.1f} sequences per eval); compile {st.compile_seconds:.2f} s", file=err)
    return 0
