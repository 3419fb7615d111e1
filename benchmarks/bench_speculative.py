"""Prompt-lookup speculative decoding vs plain greedy decoding, GPT-2 124M-shaped random weights, on
repetitive text (a random 32-token passage repeated), side by side in one run; the tokens must be equal.

    PYTHONPATH=python:BUILD python benchmarks/bench_speculative.py [--tokens 64] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

import orion  # noqa: E402
from orion.models import GPT2Config, Model  # noqa: E402
from orion.models.testing import random_weights  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passage", type=int, default=32, help="tokens of the passage repeated in the prompt")
    ap.add_argument("--copies", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--device", default="auto", choices=["auto", "sim", "ane"])
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    orion.sim.set_compile_budget(10**6)
    cfg = GPT2Config(n_layers=args.layers)
    w16 = {k: v.astype(np.float16) for k, v in random_weights(cfg, seed=0).items()}
    passage = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab_size, args.passage)]
    prompt = passage * args.copies
    m = Model(cfg, w16, device=args.device, stop_tokens=[])
    print(f"GPT-2 124M-shaped (d={cfg.d_model}, L={cfg.n_layers}), random weights; prompt {len(prompt)} tokens "
          f"({args.copies} x a {args.passage}-token passage), {args.tokens} generated, greedy, best of {args.repeats}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    m.generate(prompt, max_tokens=2)
    m.generate(prompt, max_tokens=2, speculative="prompt-lookup")             # compiles
    plain = max((m.generate(prompt, max_tokens=args.tokens) for _ in range(args.repeats)), key=lambda g: g.decode_tok_s)
    spec = max((m.generate(prompt, max_tokens=args.tokens, speculative="prompt-lookup") for _ in range(args.repeats)),
               key=lambda g: g.decode_tok_s)
    tok_s = lambda g: (len(g.tokens) - 1) / g.decode_seconds                  # noqa: E731 - tokens after the first
    print(f"\n{'':34s} {'decode tok/s':>13s} {'evals':>6s} {'tokens/eval':>12s} {'acceptance':>11s}")
    print(f"{'plain greedy':34s} {tok_s(plain):13.1f} {plain.decode_steps:6d} {1.0:12.2f} {'':>11s}")
    print(f"{'prompt lookup (<= 15 drafts/eval)':34s} {tok_s(spec):13.1f} {spec.decode_steps:6d} "
          f"{spec.tokens_per_eval:12.2f} {spec.acceptance_rate:11.2f}")
    same = spec.tokens == plain.tokens
    print(f"\nspeed-up {tok_s(spec) / tok_s(plain):.2f}x; identical tokens: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
