"""``orion quality --model M --quantize Q [--data text]``: what compressing a model's weights costs, as
ANEMLL reports it — KL divergence, logit correlation and top-1 agreement of the quantized model's logits
with the fp16 model's, both run as programs on the device, and the perplexity of each on the text."""

from __future__ import annotations

import sys

import numpy as np

from .common import add_device_flags, int_at_least, profile


def add_quality_parser(sub) -> None:
    q = sub.add_parser("quality", help="KL, logit correlation, top-1 match and perplexity of a quantized model "
                       "vs its fp16 self", description="Runs the model twice on the text (fp16 and with its "
                       "linear weights compressed by --quantize) and compares the logits position by position.")
    q.add_argument("--model", required=True, help="checkpoint folder or file, a model name or a Hub repo id")
    q.add_argument("--quantize", required=True, choices=["int8", "uint8", "lut4", "lut6", "int4", "uint4"],
                   help="compression of the layers' linear weights")
    q.add_argument("--data", default=None, help="a text file (default: the story corpus shipped with orion)")
    q.add_argument("--tokens", type=int_at_least(2), default=256, help="tokens of the text to evaluate (at most "
                   "the model's context per window)")
    q.add_argument("--tokenizer", default=None, help="tokenizer file (default: found next to the checkpoint)")
    add_device_flags(q)
    q.set_defaults(func=cmd_quality)


def _text(path) -> str:
    if path is None:
        from importlib.resources import files
        return files("orion.train").joinpath("corpus", "stories.txt").read_text(encoding="utf-8")
    from ..errors import InputError
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"--data {path}: cannot read it as UTF-8 text ({e})") from None


def cmd_quality(args, out=None) -> int:
    from ..errors import InputError
    from ..models import load
    from ..quant import quality_report

    out = out or sys.stdout
    prof = profile(args)
    base = load(args.model, tokenizer=args.tokenizer, device=args.device, profile=prof)
    if base.tokenizer is None:
        raise InputError(f"{args.model}: no tokenizer found next to the checkpoint; pass --tokenizer FILE")
    tok, bos = base.tokenizer, base.config.bos_id
    text = _text(args.data)[:16 * args.tokens]   # enough characters for --tokens tokens; not a whole corpus
    ids = list(tok.encode(text, add_special_tokens=False) if hasattr(tok, "adds_special_tokens") else tok.encode(text))
    ids = ([bos] if bos is not None else []) + ids
    ids = ids[:args.tokens]
    if len(ids) < 2:
        raise InputError("the text gives fewer than 2 tokens: nothing to predict")
    test = load(args.model, tokenizer=base.tokenizer, device=args.device, profile=prof, quantize=args.quantize)
    win = base.config.n_ctx
    ref, got, targets = [], [], []
    for i in range(0, len(ids) - 1, win):       # windows of the context; each predicts its own next tokens
        chunk = ids[i:i + win]
        if len(chunk) < 2:
            break
        ref.append(base.logits(chunk)[:-1])
        got.append(test.logits(chunk)[:-1])
        targets += chunk[1:]
    r = quality_report(np.concatenate(ref), np.concatenate(got), np.asarray(targets))
    qr = test.quantization
    print(f"{base.name}: {args.quantize} vs fp16 over {r.positions} positions of "
          f"{args.data or 'the shipped story corpus'}", file=out)
    print(f"  KL divergence     {r.kl_divergence:.4f} nats (mean, fp16 || {args.quantize})", file=out)
    print(f"  logit correlation {r.correlation:.4f}", file=out)
    print(f"  top-1 match       {100 * r.top1_match:.1f}%", file=out)
    print(f"  perplexity        {r.perplexity_test:.3f} ({args.quantize}) vs {r.perplexity_ref:.3f} (fp16)", file=out)
    print(f"  weights           {test.weight_bytes:,} bytes in the programs vs {base.weight_bytes:,} fp16 "
          f"({100 * test.weight_bytes / base.weight_bytes:.1f}%); {qr}", file=out)
    return 0
