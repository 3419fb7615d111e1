"""``orion quality --model M --quantize Q [--data text]``: what compressing a model's weights costs, as
ANEMLL reports it — KL divergence, logit correlation and top-1 agreement of the quantized model's logits
with the fp16 model's, both run as programs on the device, and the perplexity of each on the text.

``--quantize int8 --activations int8`` (experimental W8A8) adds a third model, int8 weights and int8
linear inputs, and prints int8 weights-only and W8A8 side by side (one run, the same fp16 logits). Its
static scales are calibrated on ``--calibration FILE``, by default on the text of ``--data`` that follows
the evaluated tokens (so calibration and evaluation never share text)."""

from __future__ import annotations

import sys
from importlib.resources import files

import numpy as np

from .. import models
from ..errors import InputError
from ..models.quantize import MODEL_SCHEMES
from ..quant import quality_report
from .common import UsageError, add_device_flags, int_at_least, profile
from .w8a8 import add_activation_flags, check_activation_flags, load_w8a8, read_text


def add_quality_parser(sub) -> None:
    q = sub.add_parser("quality", help="KL, logit correlation, top-1 match and perplexity of a quantized model "
                       "vs its fp16 self", description="Runs the model twice on the text (fp16 and with its "
                       "linear weights compressed by --quantize) and compares the logits position by position.")
    q.add_argument("--model", required=True, help="checkpoint folder or file, a model name or a Hub repo id")
    q.add_argument("--quantize", required=True, choices=MODEL_SCHEMES,
                   help="compression of the layers' linear weights")
    q.add_argument("--data", default=None, help="a text file (default: the story corpus shipped with orion)")
    q.add_argument("--tokens", type=int_at_least(2), default=256, help="tokens of the text to evaluate (at most "
                   "the model's context per window)")
    q.add_argument("--tokenizer", default=None, help="tokenizer file (default: found next to the checkpoint)")
    add_activation_flags(q, "W8A8 calibration text file (default: the text of --data after the evaluated tokens)")
    q.add_argument("--calibration-method", default=None, choices=["max", "percentile"],
                   help="W8A8 scale statistic: max |x| (default) or its 99.99th percentile")
    add_device_flags(q)
    q.set_defaults(func=cmd_quality)


def _text(path) -> str:
    if path is None:
        return files("orion.train").joinpath("corpus", "stories.txt").read_text(encoding="utf-8")
    return read_text("--data", path)


def cmd_quality(args, out=None) -> int:
    out = out or sys.stdout
    check_activation_flags(args)
    if args.calibration_method is not None and args.activations is None:
        raise UsageError("--calibration-method is only used with --activations int8")
    prof = profile(args)
    base = models.load(args.model, tokenizer=args.tokenizer, device=args.device, profile=prof)
    if base.tokenizer is None:
        raise InputError(f"{args.model}: no tokenizer found next to the checkpoint; pass --tokenizer FILE")
    tok, bos = base.tokenizer, base.config.bos_id
    full = _text(args.data)
    text = full[:16 * args.tokens]   # enough characters for --tokens tokens; not a whole corpus
    ids = list(tok.encode(text, add_special_tokens=False) if hasattr(tok, "adds_special_tokens") else tok.encode(text))
    ids = ([bos] if bos is not None else []) + ids
    ids = ids[:args.tokens]
    if len(ids) < 2:
        raise InputError("the text gives fewer than 2 tokens: nothing to predict")
    test = models.load(args.model, tokenizer=base.tokenizer, device=args.device, profile=prof, quantize=args.quantize)
    tested = [test]
    if args.activations is not None:
        if args.calibration is not None:
            calib = read_text("--calibration", args.calibration)
        else:
            calib = full[16 * args.tokens:]
            if not calib.strip():
                raise InputError(f"{args.data or 'the story corpus'}: no text left after the evaluated tokens to "
                                 f"calibrate the activation scales on; pass --calibration FILE")
        tested.append(load_w8a8(models.load, args.model, None, tokenizer=base.tokenizer, device=args.device,
                                profile=prof, quantize=args.quantize, activations=args.activations,
                                calibration=calib, calibration_method=args.calibration_method or "max"))
    win = base.config.n_ctx
    ref, got, targets = [], [[] for _ in tested], []
    for i in range(0, len(ids) - 1, win):       # windows of the context; each predicts its own next tokens
        chunk = ids[i:i + win]
        if len(chunk) < 2:
            break
        ref.append(base.logits(chunk)[:-1])
        for m, g in zip(tested, got):
            g.append(m.logits(chunk)[:-1])
        targets += chunk[1:]
    reports = [quality_report(np.concatenate(ref), np.concatenate(g), np.asarray(targets)) for g in got]
    if args.activations is not None:
        _print_w8a8(args, base, tested, reports, out)
        return 0
    r = reports[0]
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


def _print_w8a8(args, base, models, reports, out) -> None:
    """int8 weights-only and W8A8 side by side against the same fp16 logits."""
    (w8, w8a8), (r8, r88) = models, reports
    sc = w8a8.activation_scales
    print(f"{base.name}: int8 weights (W8) and int8 weights + int8 activations (W8A8, experimental) vs fp16 over "
          f"{r8.positions} positions of {args.data or 'the shipped story corpus'}", file=out)
    print(f"  {'':18}{'W8':>10}{'W8A8':>10}", file=out)
    print(f"  {'KL divergence':18}{r8.kl_divergence:10.4f}{r88.kl_divergence:10.4f}  nats (mean, fp16 || test)",
          file=out)
    print(f"  {'logit correlation':18}{r8.correlation:10.4f}{r88.correlation:10.4f}", file=out)
    print(f"  {'top-1 match':18}{100 * r8.top1_match:9.1f}%{100 * r88.top1_match:9.1f}%", file=out)
    print(f"  {'perplexity':18}{r8.perplexity_test:10.3f} {r88.perplexity_test:10.3f}  (fp16 {r8.perplexity_ref:.3f})",
          file=out)
    print(f"  activation scales {len(sc.scales)} linear inputs, {sc.method}"
          f"{'' if sc.percentile is None else f' {sc.percentile:g}'} of |x| over {sc.calibration_tokens} "
          f"calibration tokens of {args.calibration or 'the text after the evaluated tokens'}", file=out)
    print(f"  weights           {w8.weight_bytes:,} bytes in the programs vs {base.weight_bytes:,} fp16 "
          f"({100 * w8.weight_bytes / base.weight_bytes:.1f}%); {w8.quantization}", file=out)
