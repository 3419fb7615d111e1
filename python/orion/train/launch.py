"""The run ``orion train``'s options describe, from parsed options to exit status, for both entry points
(the command, :func:`orion.train.run`): :func:`prepare` reads the model, data, tokenizer and checkpoint the
options name (defaults < checkpoint < explicit options), :func:`run_parsed` trains, reports, exports and
samples."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sys
import time

from ..flags import UsageError
from ..lora import AdapterConfigError, LoraConfig, init_adapter, merge
from ..models.model import resolve_model_path
from ..models.quantize import quantize_model
from ..models.tokenizers import find_tokenizer, load_tokenizer
from . import checkpoint as ck
from . import data as D
from . import examples as E
from .writes import _check_writable
from .defaults import DEFAULT_CKPT_DIR, DEFAULTS, INIT_SEQ_LEN, LORA_DEFAULTS, SAMPLE_PROMPT, default_corpus
from .errors import CheckpointError, DataError, ResumeMismatch, TrainError, VocabMismatch
from .model import (PRESETS, config_from_state, init_params, llama2c_unsupported, load_pretrained, n_params, write_hf,
                    write_llama2c)
from .run_options import EXIT_BUDGET, model_config
from .runlog import LOG_NAME, RunLog
from .sample import generate
from .tokenizer_files import write_beside_bin
from .trainer import TrainConfig, Trainer, check_resume


# ---------------------------------------------------------------------------------------- setup
def _trained_tokenizer(texts: list[str], cfg, args, data_path: str):
    """(a SentencePiece tokenizer trained on ``texts``, ``cfg`` with its vocabulary size): fewer pieces than
    asked shrink a preset's vocabulary, unless --vocab set it."""
    tok = D.train_sentencepiece(texts, cfg.vocab_size)
    if tok.vocab_size != cfg.vocab_size:
        if args.m_vocab_size is not None:
            raise VocabMismatch(f"--vocab {args.m_vocab_size}: a tokenizer trained on {data_path} has "
                                f"{tok.vocab_size} pieces; pass --vocab {tok.vocab_size} or less, or more text")
        cfg = dataclasses.replace(cfg, vocab_size=tok.vocab_size)
    return tok, cfg


class _Finished(Exception):
    """A resumed run that is already at its total steps: said, and exit 0 before anything is loaded."""


def prepare(args):
    """(cfg, params, tc, dataset, tokenizer, resume checkpoint or None, state extras)."""

    ckpt_dir = None if args.no_ckpt else (args.ckpt_dir or DEFAULT_CKPT_DIR)
    resume = None
    lora_cfg = None
    if getattr(args, "lora", None):
        try:                                    # a bad --lora value is a bad flag: exit 2, before any work
            lora_cfg = LoraConfig.parse(args.lora)
            lora_cfg.check_trainable()
        except AdapterConfigError as e:
            raise UsageError(f"--lora {args.lora}: {e}") from None
    if args.resume is not None:
        rdir = args.resume or ckpt_dir or DEFAULT_CKPT_DIR
        resume = ck.load(rdir)
        if ckpt_dir is None or (args.ckpt_dir is None and args.resume):
            ckpt_dir = None if args.no_ckpt else rdir
        if resume.state.get("lora") and lora_cfg is None:
            lora_cfg = LoraConfig.from_dict(resume.state["lora"])      # a LoRA run continues as one
    elif ckpt_dir and os.path.exists(os.path.join(ckpt_dir, ck.LATEST)):
        if args.ckpt_dir:                      # never overwrite another run's checkpoints
            raise CheckpointError(f"{ckpt_dir} already holds a training run (step "
                                  f"{ck.read_state(ckpt_dir).get('step')}): continue it with --resume {ckpt_dir}, or "
                                  f"choose another --ckpt-dir")
        n = 2
        while os.path.exists(os.path.join(f"{DEFAULT_CKPT_DIR}-{n}", ck.LATEST)):
            n += 1
        ckpt_dir = f"{DEFAULT_CKPT_DIR}-{n}"
    # -- settings: defaults < checkpoint < explicit options
    base = dict(DEFAULTS)
    if lora_cfg is not None:
        base.update(LORA_DEFAULTS)
    if resume is not None:
        base.update({k: v for k, v in resume.state.get("train", {}).items() if k in base or k == "seq_len"})
    explicit = {"steps": args.steps, "batch": args.batch, "accum": args.accum, "lr": args.lr, "warmup": args.warmup,
                "weight_decay": args.weight_decay, "clip": args.clip, "loss_scale": args.loss_scale,
                "seed": args.seed, "strategy": args.strategy, "device": args.device,
                "val_fraction": args.val_fraction, "eval_interval": args.eval_interval,
                "eval_batches": args.eval_batches, "ckpt_interval": args.ckpt_interval, "keep": args.keep,
                "seq_len": args.seq_len, "residual_scale": args.residual_scale}
    base.update({k: v for k, v in explicit.items() if v is not None})
    base["steps"] = _total_steps(args, resume, base["steps"])
    if resume is not None and base["steps"] <= resume.step:
        raise _Finished(f"orion train: {resume.path} is already at step {resume.step} of {base['steps']}: nothing to "
                        f"train; pass --more-steps N to continue by N steps (or --steps above {resume.step})")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    # -- model and weights (read before anything is compiled)
    init_path = None
    if resume is not None:
        cfg = config_from_state(resume.state["model"], resume.path)
        if args.preset or args.init or any(getattr(args, a) is not None for a in vars(args) if a.startswith("m_")):
            want = model_config(args, PRESETS[args.preset] if args.preset else cfg) if not args.init else \
                load_pretrained(args.init)[0]
            if want != cfg:
                check_resume(resume.state, want, TrainConfig(**{k: v for k, v in base.items() if k in fields}), None,
                             resume.state.get("lora"))
        if resume.state.get("lora"):           # adapters only: the frozen base comes from where the run began
            init_path = resume.state.get("init")
            if init_path:
                ck.protect(init_path)
                cfg2, params = load_pretrained(init_path)
                if cfg2 != cfg:
                    raise ResumeMismatch(f"cannot resume: the base model {init_path} changed since the checkpoint")
            else:
                params = init_params(cfg, int(resume.state.get("train", {}).get("seed", base["seed"])))
        else:
            params = {k: v.copy() for k, v in resume.params.items()}
    elif args.init:
        init_path = os.path.abspath(resolve_model_path(args.init))      # a path, a name, or a Hub id
        if ck.is_run(args.init) and os.path.isdir(args.init):
            init_path = os.path.abspath(args.init)                      # a run: load_pretrained takes its latest step
        ck.protect(init_path)
        cfg, params = load_pretrained(init_path)
        if args.seq_len and args.seq_len > cfg.n_ctx:
            raise DataError(f"--seq-len {args.seq_len} exceeds the model's context {cfg.n_ctx}")
    else:
        cfg = model_config(args, PRESETS[args.preset or base["preset"]])
        params = None
    # -- data and tokenizer
    data_path = args.data or (resume.state.get("data_source") if resume is not None else None) or default_corpus()
    data_path = os.path.abspath(data_path)
    ck.protect(data_path)
    # a resumed run keeps the tokenizer its checkpoint carries (its data were tokenized with it); its --init
    # folder is not read for it again (it may have changed or gone since the start)
    tok = _run_tokenizer(resume.path, resume.state, cfg) if resume is not None else None
    if tok is not None:
        if args.tokenizer:
            raise UsageError(f"--tokenizer {args.tokenizer}: the run in {resume.path} carries its own tokenizer, "
                             f"which a resumed run keeps (its data were tokenized with it); drop --tokenizer, or "
                             f"start a new run")
    elif args.tokenizer:
        # a SentencePiece .model stays the trainer's class (its bytes go into checkpoints); tokenizer.json,
        # tokenizer.bin, vocab.json: read as orion generate reads them
        tok = D.load_tokenizer(args.tokenizer) if args.tokenizer.endswith(".model") else \
            load_tokenizer(args.tokenizer, cfg.vocab_size)
    elif init_path and resume is None:
        if ck.is_run(init_path):                            # an orion train checkpoint carries its tokenizer
            tok = _run_tokenizer(ck.resolve(init_path), ck.read_state(init_path), cfg)
        else:                                               # found as orion generate finds it (tokenizer.json first)
            tok = find_tokenizer(init_path, cfg)
    jsonl = E.is_jsonl_data(data_path)
    mask_prompt = bool(args.mask_prompt or (resume is not None and resume.state.get("mask_prompt")))
    if (mask_prompt or args.test) and not jsonl:
        raise UsageError(f"--{'mask-prompt' if mask_prompt else 'test'} needs JSON Lines data (a .jsonl file, or a "
                         f"folder with train.jsonl{'' if mask_prompt else ' and test.jsonl'}); --data is {data_path}")
    splits = None
    if jsonl:
        splits = E.read_splits(data_path, base["val_fraction"])
        if args.test and not splits.get("test"):
            raise UsageError(f"--test: {data_path} has no test split (test.jsonl beside train.jsonl)")
        if tok is None:
            if init_path or resume is not None:
                raise VocabMismatch("JSONL data with a pretrained or resumed model needs that model's tokenizer: "
                                    "pass --tokenizer PATH")
            tok, cfg = _trained_tokenizer(E.texts_of(splits), cfg, args, data_path)
    elif data_path.endswith(".bin"):
        tokens = D.read_token_bin(data_path)
    else:
        docs = D.read_texts(data_path)
        if tok is None:
            if init_path or resume is not None:
                raise VocabMismatch("text data with a pretrained or resumed model needs that model's tokenizer: "
                                    "pass --tokenizer PATH (e.g. tokenizer.model)")
            tok, cfg = _trained_tokenizer(docs, cfg, args, data_path)
        tokens = D.encode_documents(docs, tok)
    if tok is not None and tok.vocab_size > cfg.vocab_size:
        raise VocabMismatch(f"tokenizer vocabulary {tok.vocab_size} is larger than the model's {cfg.vocab_size}")
    if params is None:
        params = init_params(cfg, int(base["seed"]))
    base["ckpt_dir"] = ckpt_dir
    # a pretrained model's context (32k-128k today) is no training window: --init starts at INIT_SEQ_LEN
    cap = min(cfg.n_ctx, INIT_SEQ_LEN) if init_path else cfg.n_ctx
    if jsonl:       # JSONL: one example per window, by default as long as the longest example needs (up to cap)
        dataset = E.load_examples(data_path, tok, base.get("seq_len"), cfg.vocab_size, mask_prompt,
                                  int(base["seed"]), base["val_fraction"], splits, max_seq_len=cap)
        base["seq_len"] = dataset.seq_len
    base["seq_len"] = seq = base.get("seq_len") or cap
    tc = TrainConfig(**{k: v for k, v in base.items() if k in fields})
    if not jsonl:
        dataset = D.TokenDataset(tokens, seq, cfg.vocab_size, tc.val_fraction, tc.seed, source=data_path)
    # a resumed run keeps naming the model it began from (its tokenizer and a LoRA base are found there)
    extras = {"data_source": data_path, "init": init_path or (resume.state.get("init") if resume else None)}
    if mask_prompt:
        extras["mask_prompt"] = True
    if lora_cfg is not None:
        extras["lora_config"] = lora_cfg
    quantize = getattr(args, "quantize", None) or (resume.state.get("lora_quantize") if resume is not None else None)
    if quantize is not None:
        if lora_cfg is None:
            raise UsageError("--quantize compresses a frozen base: it needs --lora (full training updates every "
                             "weight)")
        extras["lora_quantize"] = quantize
    return cfg, params, tc, dataset, tok, resume, extras


def _total_steps(args, resume, steps: int) -> int:
    """--steps is the run's total, also on --resume; --more-steps N continues N beyond the checkpoint."""
    done = resume.step if resume is not None else 0
    more = getattr(args, "more_steps", None)
    if more is not None:
        if args.steps is not None:
            raise UsageError("--steps (the total) and --more-steps (beyond the checkpoint) exclude each other")
        return done + more
    if args.steps is not None and args.steps < done:
        raise UsageError(f"--steps {args.steps}: the run is already at step {done} and --steps is the total; "
                         f"give --steps above {done}, or --more-steps N to continue by N steps")
    return steps


def _run_tokenizer(folder: str, state: dict, cfg):
    """The tokenizer an orion train checkpoint (step folder) carries, as its run used it: the SentencePiece
    model the run trained or was given, else the files it read (tokenizer.json first, as orion generate
    does); an HF tokenizer.json shipped beside a tokenizer.model stays the HF tokenizer. None: no tokenizer."""
    used = state.get("tokenizer") or ""                  # the fingerprint: "spm:", "hf:", "bin:" + hash
    spm = os.path.join(folder, "tokenizer.model")
    if os.path.isfile(spm) and not used.startswith(("hf:", "bin:")):
        with open(spm, "rb") as f:
            return D.SentencePieceTokenizer(f.read())
    return find_tokenizer(folder, cfg)


# ---------------------------------------------------------------------------------------- run
def _fmt_split(rec) -> str:
    return (f"dev {rec.t_device * 1e3:.0f} cpu {rec.t_cpu * 1e3:.0f} upd {rec.t_update * 1e3:.0f} "
            f"opt {rec.t_optim * 1e3:.0f}{f' comm {rec.t_comm * 1e3:.0f}' if rec.t_comm else ''} ms")


def run_parsed(args, dist=None, outcome: dict | None = None) -> int:
    """The run ``args`` describe (after :func:`model_flags` and the flag checks); its exit status.
    ``outcome`` (the Python entry point, :func:`orion.train.run`) receives ``result`` (the
    :class:`~orion.train.TrainResult`), ``params`` (the final weights, an adapter merged), ``adapter``,
    ``config`` and ``checkpoint``; ``args.on_step`` (if set) is called with every step's record."""

    try:
        cfg, params, tc, data, tok, resume, extras = prepare(args)
    except _Finished as e:
        print(e)
        return 0
    if dist is not None:
        if args.restart_on_budget:
            raise TrainError("--restart-on-budget cannot re-exec MPI ranks; rerun the mpiexec command with --resume")
        # --accum (and the default 1) count per rank; a checkpoint's accum is already the run's global one
        tc = dataclasses.replace(tc, accum=tc.accum * dist.size if args.accum is not None or resume is None
                                 else tc.accum)
    if args.export_bin and llama2c_unsupported(cfg):            # refuse before training, not after
        raise TrainError(f"--export-bin: a llama2.c .bin cannot hold this model "
                         f"({', '.join(llama2c_unsupported(cfg))}); use --export-hf")
    lora_cfg = extras.pop("lora_config", None)
    adapter = None
    if lora_cfg is not None:
        if lora_cfg.base_model is None and extras.get("init"):
            lora_cfg = dataclasses.replace(lora_cfg, base_model=extras["init"])
        adapter = init_adapter(cfg, lora_cfg, seed=tc.seed, base=params, name="orion-train")
        if extras.get("lora_quantize"):         # after the adapter's base fingerprint, which names the fp16 base
            params, _ = quantize_model(params, extras["lora_quantize"])
        if extras.get("init") is None and resume is None:
            logging.getLogger("orion").warning(
                "orion train: LoRA on a freshly initialised base model (no --model); pass --model with a trained "
                "model (e.g. an orion train checkpoint folder) for a real fine-tune")
    t_setup = time.perf_counter()
    trainer = Trainer(cfg, tc, params, data, tokenizer=tok, resume=resume, extra_state=extras, lora=adapter,
                      dist=dist)
    dev = trainer.progs.device
    what = (f"LoRA r={lora_cfg.r} alpha={lora_cfg.alpha:g} on {len(adapter.names)} linears "
            f"({', '.join(sorted({n.rsplit('.', 1)[-1] for n in adapter.names}))}; "
            f"{sum(a.size for a in adapter.params().values()):,} trainable, base frozen, "
            f"{'shared by every layer as program inputs' if trainer.progs.lora_shared else 'baked per layer'})"
            if adapter is not None else f"strategy {tc.strategy}")
    kind = "Llama" if cfg.model_type == "llama" else f"Llama-style {cfg.model_type}"
    print(f"orion train: {cfg.n_layers}-layer {kind} d={cfg.d_model} heads={cfg.n_heads}/{cfg.n_kv_heads} "
          f"hidden={cfg.d_ff} vocab={cfg.vocab_size} ({n_params(cfg) / 1e6:.2f}M params) on {dev}; "
          f"{what} ({trainer.progs.n_programs} programs, "
          f"{trainer.progs.compiles_per_update()} compiles per update); data {data.n_tokens:,} "
          f"{'target tokens' if hasattr(data, 'test_batches') else 'tokens'} "
          f"({data.n_windows} train / {data.n_val_windows} val windows of {tc.seq_len}); batch {tc.batch}x{tc.accum}"
          f"{f' ({dist.size} MPI ranks x {tc.accum // dist.size} microbatches)' if dist else ''}; "
          f"steps {trainer.step}->{tc.steps}; compile {time.perf_counter() - t_setup:.1f}s")
    notes = [f"{n} {what}" for n, what in ((getattr(data, "truncated", 0), ("examples longer than the window were "
                                            f"truncated to {tc.seq_len + 1} tokens")),
                                           (getattr(data, "unlocated_turns", 0), ("assistant turns the chat template "
                                            "renders differently once later turns follow stay context")))
             if n]
    if notes:
        print("data: " + "; ".join(notes))
    log_path = args.log_jsonl or (os.path.join(tc.ckpt_dir, LOG_NAME) if tc.ckpt_dir else None)
    log_f = RunLog(log_path, trainer.step) if log_path and (dist is None or dist.is_root) else None
    bar = None
    if not args.no_progress and tc.steps > trainer.step:
        from tqdm.auto import tqdm  # start-up: tqdm.auto (~50 ms), only with a bar (a notebook widget or terminal text)
        bar = tqdm(total=tc.steps, initial=trainer.step, unit="step", dynamic_ncols=True, file=sys.stderr)
    user_on_step = getattr(args, "on_step", None)
    ema = [None]

    def on_step(rec):
        if math.isfinite(rec.loss):
            ema[0] = rec.loss if ema[0] is None else 0.9 * ema[0] + 0.1 * rec.loss
        tps = rec.tokens / rec.t_total if rec.t_total > 0 else 0.0
        if bar is not None:
            bar.set_postfix_str(f"loss {rec.loss:.3f} {tps:,.0f} tok/s {_fmt_split(rec)}"
                                + (" SKIP" if rec.skipped else ""), refresh=False)
            bar.update(1)
        elif rec.step % 10 == 0 or rec.step == tc.steps:
            print(f"step {rec.step}/{tc.steps} loss {rec.loss:.4f} {tps:,.0f} tok/s {_fmt_split(rec)} "
                  f"compiles {rec.compiles} loads {rec.loads}")
        if log_f:
            log_f.step(rec)
        if user_on_step is not None:
            user_on_step(rec)

    shown_val = []

    def on_eval(step, v):
        shown_val.append(step)
        if log_f:
            log_f.val(step, v)
        msg = f"step {step}: val loss {v:.4f}"
        (bar.write(msg) if bar is not None else print(msg))

    try:
        res = trainer.train(on_step=on_step, on_eval=on_eval, exit_on_second_interrupt=True)
    finally:
        if bar is not None:
            bar.close()
        if log_f:
            log_f.close()
    if outcome is not None:
        outcome.update(result=res, config=cfg, checkpoint=res.checkpoint, params=trainer.params, adapter=adapter)
    if dist is not None and not dist.is_root:       # rank 0 reports, exports and samples
        trainer.close()
        return {"budget": EXIT_BUDGET, "interrupted": 130}.get(res.status, 0)
    recs = res.records
    if recs:
        n = len(recs)
        tot = sum(r.t_total for r in recs)
        split = {k: sum(getattr(r, "t_" + k) for r in recs) / tot * 100 for k in ("device", "cpu", "update", "optim")}
        print(f"trained {n} steps in {tot:.1f}s ({sum(r.tokens for r in recs) / tot:,.0f} tok/s): loss "
              f"{recs[0].loss:.3f} -> {recs[-1].loss:.3f}; time split device {split['device']:.0f}% cpu "
              f"{split['cpu']:.0f}% update {split['update']:.0f}% optim {split['optim']:.0f}%"
              f"{f' comm {sum(r.t_comm for r in recs) / tot * 100:.0f}%' if dist else ''}; "
              f"compiles {sum(r.compiles for r in recs)} loads {sum(r.loads for r in recs)} during training")
    if res.val and res.val[-1][0] not in shown_val:
        print(f"validation loss {res.val[-1][1]:.4f} at step {res.val[-1][0]}")
    if args.test and res.status != "interrupted":
        t = trainer.evaluate(split="test")
        print(f"test loss {t:.4f}, perplexity {math.exp(min(t, 700.0)):.3f} ({data.n_test_windows} examples)")
    st = res.stats
    print("stability: " + ", ".join(f"{k} {v}" for k, v in st.items()))
    if res.checkpoint:
        what = "LoRA adapters on its base; generate with them" if adapter is not None else "a model"
        print(f"checkpoint: {res.checkpoint} ({what}: orion generate --model {res.checkpoint})")
    if log_path:
        print(f"training log: {log_path} (draw it: orion plot {tc.ckpt_dir if not args.log_jsonl else log_path})")
    if res.message:
        print(res.message)
    trainer.close()
    if res.status == "budget":
        if args.restart_on_budget and res.checkpoint:
            argv, skip = [], False
            for a in sys.argv[1:]:
                if skip:
                    skip = False
                    if not a.startswith("-"):
                        continue
                if a == "--resume":
                    skip = True
                    continue
                if not a.startswith("--resume="):
                    argv.append(a)
            argv += ["--resume", os.path.dirname(res.checkpoint)]
            print("orion train: restarting with a fresh compile budget ...", flush=True)
            orig = getattr(sys, "orig_argv", [sys.executable, sys.argv[0]] + sys.argv[1:])
            prefix = orig[:len(orig) - (len(sys.argv) - 1)]      # interpreter + options + script / -m module
            os.execv(sys.executable, [sys.executable] + prefix[1:] + argv)
        return EXIT_BUDGET
    final = trainer.params
    if adapter is not None:
        out_dir = args.export_adapter or (os.path.join(tc.ckpt_dir, "adapter") if tc.ckpt_dir else None)
        if out_dir:
            _check_writable(os.path.abspath(out_dir))
            adapter.save(out_dir)
            print(f"adapter (PEFT folder): {out_dir}")
        else:
            print("adapter not saved (no --ckpt-dir or --export-adapter)")
        final = merge(trainer.params, adapter)              # exports and the sample use base + adapter
        if outcome is not None:
            outcome["params"] = final
    if args.export_bin:
        write_llama2c(args.export_bin, cfg, final)
        tok_path = write_beside_bin(args.export_bin, trainer.tokenizer_files())
        print(f"exported llama2.c checkpoint{' (adapter merged)' if adapter is not None else ''}: "
              f"{args.export_bin}" + (f" with its tokenizer {tok_path}" if tok_path else
                                      " (its Hugging Face tokenizer needs a folder: --export-hf DIR)"))
    if args.export_hf:
        write_hf(args.export_hf, cfg, final, tokenizer_files=trainer.tokenizer_files())
        print(f"exported Hugging Face folder{' (adapter merged)' if adapter is not None else ''}: {args.export_hf}")
    if res.status == "interrupted":
        return 130
    if args.sample_tokens > 0 and tok is not None:
        prompt = SAMPLE_PROMPT if args.prompt is None else args.prompt
        pids = tok.encode(prompt)
        bos = [tok.bos_id] if tok.bos_id is not None else []
        # documents are separated by BOS (or, without one, EOS) in the training stream: either ends a sample
        stops = {i for i in (tok.bos_id, getattr(tok, "eos_id", None)) if i is not None}
        out = generate(cfg, final, bos + pids, args.sample_tokens, args.temperature, seed=tc.seed, stop_id=stops)
        print(f"sample (temperature {args.temperature}):\n{tok.decode(pids + out)}")
    return 0
